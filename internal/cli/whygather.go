// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufrac/gpufrac/internal/cli/why"
)

// pluginSelector finds gpufrac-kubelet-plugin pods (the Helm chart's
// labels), whose /metrics carry the per-container memory in use.
const pluginSelector = "app.kubernetes.io/name=gpufrac,app.kubernetes.io/component=kubelet-plugin"

// gather reads what the user may read for explaining arg (a pod name, or
// resourceclaim/NAME) in namespace. Reads the user's access forbids are
// listed in the snapshot's Unseen instead of failing, except the pod or
// claim itself.
func gather(ctx context.Context, client kubernetes.Interface, namespace, arg string) (why.Snapshot, why.Target, error) {
	var snap why.Snapshot
	unseen := func(format string, args ...any) { snap.Unseen = append(snap.Unseen, fmt.Sprintf(format, args...)) }

	target, err := readTarget(ctx, client, namespace, arg, unseen)
	if err != nil {
		return snap, target, err
	}
	if err := readSlicesAndClasses(ctx, client, target, &snap, unseen); err != nil {
		return snap, target, err
	}
	if err := readClaimsAndNodes(ctx, client, namespace, &snap, unseen); err != nil {
		return snap, target, err
	}
	gatherUsage(ctx, client, target, &snap, unseen)
	return snap, target, nil
}

// readTarget reads the pod or claim arg names, and the pod's claims (one
// it may not read is listed as unseen, one not there yet as missing).
func readTarget(ctx context.Context, client kubernetes.Interface, namespace, arg string, unseen func(string, ...any)) (why.Target, error) {
	var target why.Target
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		kind, name = "pod", arg
	}
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return target, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
		}
		target.Pod = pod
		for _, pc := range pod.Spec.ResourceClaims {
			claim, err := podClaim(ctx, client, pod, pc)
			switch {
			case apierrors.IsForbidden(err):
				unseen("claim %q of the pod (cannot read resourceclaims in %s)", pc.Name, namespace)
			case err != nil:
				return target, err
			case claim == nil:
				target.Missing = append(target.Missing, pc.Name)
			default:
				target.Claims = append(target.Claims, claim)
			}
		}
	case "resourceclaim", "resourceclaims", "claim":
		claim, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return target, fmt.Errorf("reading resourceclaim %s/%s: %w", namespace, name, err)
		}
		target.Claims = append(target.Claims, claim)
	default:
		return target, fmt.Errorf("%q: want a pod name or resourceclaim/NAME", arg)
	}
	return target, nil
}

// readSlicesAndClasses reads every ResourceSlice and DeviceClass into
// snap; where classes cannot be listed, those target's claims name.
func readSlicesAndClasses(ctx context.Context, client kubernetes.Interface, target why.Target, snap *why.Snapshot, unseen func(string, ...any)) error {
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		unseen("resourceslices (cannot list): no GPU can be replayed, so no node is explained")
	case err != nil:
		return fmt.Errorf("listing ResourceSlices: %w", err)
	default:
		for i := range slices.Items {
			snap.Slices = append(snap.Slices, &slices.Items[i])
		}
	}

	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		unseen("deviceclasses (cannot list): only the classes the claims name were read, where allowed")
		for _, c := range classNames(target.Claims) {
			class, err := client.ResourceV1().DeviceClasses().Get(ctx, c, metav1.GetOptions{})
			if err == nil {
				snap.Classes = append(snap.Classes, class)
			}
		}
	case err != nil:
		return fmt.Errorf("listing DeviceClasses: %w", err)
	default:
		for i := range classes.Items {
			snap.Classes = append(snap.Classes, &classes.Items[i])
		}
	}
	return nil
}

// readClaimsAndNodes reads every ResourceClaim (those of namespace where
// the user may not list them cluster-wide) and every Node into snap.
func readClaimsAndNodes(ctx context.Context, client kubernetes.Interface, namespace string, snap *why.Snapshot, unseen func(string, ...any)) error {
	claims := client.ResourceV1().ResourceClaims(namespace)
	all, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		unseen("resourceclaims outside namespace %s (cannot list them cluster-wide): the GPU memory they hold counts as free here, "+
			"so free memory may be overstated and a suggestion may not hold", namespace)
		all, err = claims.List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			unseen("resourceclaims in namespace %s (cannot list)", namespace)
			all, err = &resourceapi.ResourceClaimList{}, nil
		}
	}
	if err != nil {
		return fmt.Errorf("listing ResourceClaims: %w", err)
	}
	for i := range all.Items {
		snap.Claims = append(snap.Claims, &all.Items[i])
	}

	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		unseen("nodes (cannot list): the pod's node selector and affinity are not applied; every node with GPUs is a candidate")
	case err != nil:
		return fmt.Errorf("listing Nodes: %w", err)
	default:
		for i := range nodes.Items {
			snap.Nodes = append(snap.Nodes, &nodes.Items[i])
		}
	}
	return nil
}

// podClaim is the claim a pod's entry refers to: named, or generated from
// a template (its name in the pod's status). A generated claim that does
// not exist yet is built from its template the way the resourceclaim
// controller would, so a Pending pod can still be explained; nil when
// neither is there.
func podClaim(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, pc v1.PodResourceClaim) (*resourceapi.ResourceClaim, error) {
	name := ""
	if pc.ResourceClaimName != nil {
		name = *pc.ResourceClaimName
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == pc.Name && s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if name != "" {
		claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return claim, err
	}
	if pc.ResourceClaimTemplateName == nil {
		return nil, nil
	}
	tmpl, err := client.ResourceV1().ResourceClaimTemplates(pod.Namespace).Get(ctx, *pc.ResourceClaimTemplateName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name + "-" + pc.Name + " (from template " + tmpl.Name + ")", Namespace: pod.Namespace,
			UID: types.UID("template-" + string(pod.UID) + "-" + pc.Name)},
		Spec: *tmpl.Spec.Spec.DeepCopy(),
	}, nil
}

func classNames(claims []*resourceapi.ResourceClaim) []string {
	names := sets.New[string]()
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil {
				names.Insert(r.Exactly.DeviceClassName)
			}
			for _, s := range r.FirstAvailable {
				names.Insert(s.DeviceClassName)
			}
		}
	}
	return sets.List(names)
}

// gatherUsage reads the memory in use from the plugin's /metrics on each node
// where the target has an allocated share, through the API server's pod
// proxy.
func gatherUsage(ctx context.Context, client kubernetes.Interface, target why.Target, snap *why.Snapshot, unseen func(string, ...any)) {
	nodes := sets.New[string]()
	for _, c := range target.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			nodes.Insert(r.Pool)
		}
	}
	if nodes.Len() == 0 {
		return
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: pluginSelector})
	if err != nil {
		unseen("memory in use (cannot list gpufrac-kubelet-plugin pods: %v)", err)
		return
	}
	for _, node := range sets.List(nodes) {
		var plugin *v1.Pod
		for i := range pods.Items {
			if pods.Items[i].Spec.NodeName == node && pods.Items[i].Status.Phase == v1.PodRunning {
				plugin = &pods.Items[i]
			}
		}
		port := metricsPort(plugin)
		if port == "" {
			unseen("memory in use on node %s (no running gpufrac-kubelet-plugin pod with a metrics port there)", node)
			continue
		}
		raw, err := readMetrics(ctx, client, plugin, port)
		if err != nil {
			unseen("memory in use on node %s (reading the plugin's /metrics through pods/proxy: %v)", node, err)
			continue
		}
		u, err := why.ParseUsage(bytes.NewReader(raw))
		if err != nil {
			unseen("memory in use on node %s (%v)", node, err)
			continue
		}
		snap.Usage = append(snap.Usage, u...)
	}
}

// maxMetricsBytes bounds what is read of one node's /metrics: a node with
// a thousand containers publishes well under 1 MiB (inferred from the
// plugin's few series per container), and a node that sends without end
// must not exhaust the user's memory.
const maxMetricsBytes = 16 << 20

func readMetrics(ctx context.Context, client kubernetes.Interface, plugin *v1.Pod, port string) ([]byte, error) {
	body, err := client.CoreV1().Pods(plugin.Namespace).ProxyGet("http", plugin.Name, port, "/metrics", nil).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(body, maxMetricsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxMetricsBytes {
		return nil, fmt.Errorf("more than %d MiB, the most read of one node's metrics", maxMetricsBytes>>20)
	}
	return raw, nil
}

func metricsPort(pod *v1.Pod) string {
	if pod == nil {
		return ""
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				return fmt.Sprint(p.ContainerPort)
			}
		}
	}
	return ""
}
