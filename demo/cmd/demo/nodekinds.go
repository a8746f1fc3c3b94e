// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// Two more kinds of node, after the main demo so its pods never land there:
// an older driver (no per-cgroup limits: --simulate-enforcement=mps) and a
// GPU Operator node (NVML only under <root>/run/nvidia/driver).
const (
	oldNode = "demo-old-driver"
	opNode  = "demo-gpu-operator"
)

// nodeKinds adds the two nodes, runs a pod without a limit and one with a
// limit on the older-driver node and one with a limit on the GPU Operator
// node, and shows what happened. It returns an error when any of that did
// not go as it must.
func nodeKinds(ctx context.Context, o options, cp *harness.ControlPlane, cluster string, w io.Writer) error {
	opRoot := filepath.Join(cluster, "gpu-operator", "run", "nvidia", "driver")
	if err := os.MkdirAll(opRoot, 0o755); err != nil {
		return err
	}
	// The operator's driver container has MPS: the daemon Pods chroot into
	// its root and run its usr/bin/nvidia-cuda-mps-control (the double).
	if err := cp.InstallMPSDouble(ctx, opRoot); err != nil {
		return err
	}
	var op *harness.RealNode
	cdiRoots := map[string]string{}
	for _, n := range []struct {
		name string
		args []string
	}{
		{oldNode, []string{"--simulate-enforcement=mps"}},
		{opNode, []string{"--driver-root=" + opRoot}},
	} {
		if o.real {
			rn, err := cp.AddRealNode(ctx, harness.RealNodeOptions{Name: n.name, GPUs: "h100x2", PluginArgs: n.args})
			if err != nil {
				return err
			}
			cdiRoots[n.name] = rn.CDIRoot
			if n.name == opNode {
				op = rn
			}
			continue
		}
		sn, err := cp.AddNode(ctx, harness.NodeOptions{Name: n.name, GPUs: "h100x2", PluginArgs: n.args})
		if err != nil {
			return err
		}
		cdiRoots[n.name] = sn.CDIRoot
	}
	c := cp.Client
	ns := "default"
	for _, t := range []struct{ name, config string }{
		{"old-plain", "computeMode: TimeSlicing\n"},
		{"old-capped", "memoryLimit: 30Gi\ncomputeMode: TimeSlicing\n"},
		{"op-capped", "memoryLimit: 30Gi\n"},
	} {
		if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, template(t.name, t.config), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceClaimTemplate %s: %w", t.name, err)
		}
	}
	for _, p := range []struct{ name, node, template string }{
		{"old-plain", oldNode, "old-plain"}, {"old-capped", oldNode, "old-capped"}, {"op-capped", opNode, "op-capped"},
	} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, kindPod(p.name, p.node, p.template, o.real), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.name, err)
		}
	}
	for _, name := range []string{"old-plain", "op-capped"} {
		if err := waitPodRunning(ctx, cp, ns, name, o.timeout); err != nil {
			return err
		}
	}
	refusal, err := waitEvent(ctx, cp, ns, "this node enforces GPU memory limits only for SMSharing", o.timeout)
	if err != nil {
		return fmt.Errorf("the claim with a limit on the older-driver node was not refused with the reason: %w", err)
	}
	_, _ = fmt.Fprintf(w, "  %s (driver %s, no nvmlDeviceSetMemoryLimits_v1):\n", oldNode, gpusim.OldDriverVersion)
	if err := showSpec(ctx, cp, w, ns, "old-plain", cdiRoots); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(w, "    pod old-capped (memoryLimit 30Gi) refused: %s\n", refusal)
	_, _ = fmt.Fprintf(w, "  %s (NVML only under %s):\n", opNode, opRoot)
	if err := showSpec(ctx, cp, w, ns, "op-capped", cdiRoots); err != nil {
		return err
	}
	if op != nil {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, "op-capped", metav1.GetOptions{})
		if err != nil {
			return err
		}
		id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
		records, err := op.LimitRecords()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(records, func(r gpusim.LimitRecord) bool { return id != "" && strings.HasSuffix(r.Cgroup, id) })
		if i < 0 {
			return fmt.Errorf("the hook on %s set no limits for pod op-capped", opNode)
		}
		_, _ = fmt.Fprintf(w, "    gpufrac-cdi-hook found NVML under the driver root and set soft %s, hard %s on %s\n",
			gib(int64(records[i].Soft)), gib(int64(records[i].Hard)), records[i].Cgroup)
	}
	return nil
}

func template(name, config string) *resourceapi.ResourceClaimTemplate {
	params := `{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig"`
	for _, line := range strings.Split(strings.TrimSpace(config), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		params += fmt.Sprintf(",%q:%q", k, v)
	}
	params += "}"
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpufrac.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}},
			}}},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: []byte(params)}}}}},
		}}}}
}

func kindPod(name, node, template string, realNode bool) *v1.Pod {
	image, cmd := "busybox", []string{"sleep", "3600"}
	if realNode {
		image, cmd = harness.NodeImage, []string{"/probe"}
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		ResourceClaims:                []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
		Containers: []v1.Container{{Name: "main", Image: image, ImagePullPolicy: v1.PullNever, Command: cmd,
			Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
	}}
}

func waitPodRunning(ctx context.Context, cp *harness.ControlPlane, ns, name string, timeout time.Duration) error {
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == v1.PodRunning, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s did not reach Running: %w (status %+v)", name, err, last.Status)
	}
	return nil
}

func waitEvent(ctx context.Context, cp *harness.ControlPlane, ns, substring string, timeout time.Duration) (string, error) {
	var found string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if strings.Contains(ev.Message, substring) {
				found = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

// showSpec prints whether the pod's CDI spec carries a hook, and which
// memory variables.
func showSpec(ctx context.Context, cp *harness.ControlPlane, w io.Writer, ns, podName string, cdiRoots map[string]string) error {
	pod, err := cp.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return fmt.Errorf("pod %s has no claim", podName)
	}
	claim, err := cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	path := filepath.Join(cdiRoots[pod.Spec.NodeName], cdispec.SpecName(claim.UID))
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec cdispecs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	hooks := "no hook"
	if len(spec.ContainerEdits.Hooks) > 0 {
		hooks = "hook " + strings.Join(spec.ContainerEdits.Hooks[0].Args, " ")
	}
	var vars []string
	for _, e := range spec.ContainerEdits.Env {
		if strings.HasPrefix(e, "NVIDIA_GPU_MEMORY") || strings.HasPrefix(e, "GPUFRAC_GPU_MEMORY") {
			vars = append(vars, e)
		}
	}
	if len(vars) == 0 {
		vars = []string{"no memory variable"}
	}
	_, _ = fmt.Fprintf(w, "    pod %s Running; CDI spec: %s; %s\n", podName, hooks, strings.Join(vars, " "))
	return nil
}
