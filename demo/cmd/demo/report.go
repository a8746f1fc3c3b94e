// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/cli/status"
)

// reporter reads the demo's objects back from the API server (and the
// stand-ins' records) to show what happened.
type reporter struct {
	ctx       context.Context
	client    kubernetes.Interface
	nodes     []*harness.Node
	realNodes []*harness.RealNode
	namespace string
}

// persistentFailures is how many failed prepare attempts, over at least
// persistentAfter, make the demo stop waiting for a pod: the kubelet would
// keep retrying, but a newcomer should not wait minutes for the same error.
const (
	persistentFailures = 5
	persistentAfter    = 10 * time.Second
)

// waitRunning waits until every pod in the namespace is Running. It returns
// a line per pod that is not, with the reason, when the timeout passes or
// when the remaining pods keep failing the same way.
func (r *reporter) waitRunning(timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	defer cancel()
	start := time.Now()
	seen := map[string]string{}
	for {
		pods, err := r.client.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		var notRunning []string
		stuck := 0
		for i := range pods.Items {
			pod := &pods.Items[i]
			state, why, failing := r.podState(ctx, pod)
			if seen[pod.Name] != state {
				seen[pod.Name] = state
				fmt.Printf("    %6s  pod %-11s %s\n", time.Since(start).Round(100*time.Millisecond), pod.Name, state)
			}
			if state != "Running" {
				notRunning = append(notRunning, fmt.Sprintf("pod %s: %s", pod.Name, why))
				if failing {
					stuck++
				}
			}
		}
		if len(pods.Items) > 0 && len(notRunning) == 0 {
			return nil, nil
		}
		if len(notRunning) > 0 && stuck == len(notRunning) {
			return notRunning, fmt.Errorf("%d pod(s) keep failing and would stay out of Running", stuck)
		}
		select {
		case <-ctx.Done():
			return notRunning, fmt.Errorf("pods not Running after %s", timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podState says where a pod is, why, and whether it keeps failing.
func (r *reporter) podState(ctx context.Context, pod *v1.Pod) (string, string, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return "Pending (unschedulable)", "not scheduled: " + c.Message, false
		}
	}
	if pod.Spec.NodeName == "" {
		return "Pending", "not scheduled yet", false
	}
	if pod.Status.Phase == v1.PodRunning {
		return "Running", "", false
	}
	events, err := r.client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
	if err != nil {
		events = &v1.EventList{}
	}
	var last *v1.Event
	for i := range events.Items {
		ev := &events.Items[i]
		if ev.Type == v1.EventTypeWarning && (last == nil || ev.LastTimestamp.After(last.LastTimestamp.Time)) {
			last = ev
		}
	}
	state := "scheduled on " + pod.Spec.NodeName
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			state = fmt.Sprintf("on %s, %s", pod.Spec.NodeName, w.Reason)
		}
	}
	if last == nil {
		return state, state, false
	}
	failing := last.Count >= persistentFailures && last.LastTimestamp.Sub(last.FirstTimestamp.Time) >= persistentAfter
	return state, fmt.Sprintf("%s: %s (%s, %d times)", state, last.Message, last.Reason, last.Count), failing
}

// claimName is the generated claim of a pod's named claim.
func (r *reporter) claimName(pod, podClaim string) (string, error) {
	p, err := r.client.CoreV1().Pods(r.namespace).Get(r.ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("getting pod %s: %w", pod, err)
	}
	for i := range p.Spec.ResourceClaims {
		if p.Spec.ResourceClaims[i].Name == podClaim {
			name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
			if err != nil || name == nil {
				return "", fmt.Errorf("pod %s has no ResourceClaim for %s yet: %v", pod, podClaim, err)
			}
			return *name, nil
		}
	}
	return "", fmt.Errorf("pod %s has no claim %s", pod, podClaim)
}

// waitPrepared waits until every claim on a gpufrac GPU reports, in its
// status, what the plugin enforced: the plugin writes claim status in the
// background, just after Prepare.
func (r *reporter) waitPrepared() error {
	err := wait.PollUntilContextTimeout(r.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sliceList, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("listing ResourceSlices: %w", err)
		}
		claims, err := r.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		for _, g := range status.Build(sliceList.Items, claims.Items, "") {
			for _, c := range g.Claims {
				if !c.Prepared {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the plugins' claim status: %w", err)
	}
	return nil
}

// containers prints, for each Running pod, what CDI injection gave its
// containers.
func (r *reporter) containers(w io.Writer) {
	for _, n := range r.nodes {
		for _, rec := range n.StandIn.Pods() {
			for _, c := range rec.Containers {
				if len(c.CDIDevices) == 0 {
					continue // MPS daemons and other pods without claims
				}
				_, _ = fmt.Fprintf(w, "  %s/%s on %s (CDI devices %s)\n", rec.Name, c.Name, rec.Node, strings.Join(c.CDIDevices, ", "))
				for _, kv := range c.Env {
					if strings.HasPrefix(kv, "NVIDIA_") || strings.HasPrefix(kv, "CUDA_") {
						_, _ = fmt.Fprintf(w, "      env    %s\n", kv)
					}
				}
				var devs []string
				for _, d := range c.DeviceNodes {
					devs = append(devs, d.Path)
				}
				if len(devs) > 0 {
					_, _ = fmt.Fprintf(w, "      dev    %s\n", strings.Join(devs, " "))
				}
				for _, m := range c.Mounts {
					_, _ = fmt.Fprintf(w, "      mount  %s -> %s\n", m.Source, m.Destination)
				}
				if line := mpsRoute(c.Env, c.Mounts); line != "" {
					_, _ = fmt.Fprintf(w, "      mps    %s\n", line)
				}
				if c.Hooks != nil {
					for _, h := range c.Hooks.CreateRuntime {
						_, _ = fmt.Fprintf(w, "      hook   createRuntime: %s\n", strings.Join(append([]string{h.Path}, h.Args...), " "))
					}
				}
			}
		}
		_, _ = fmt.Fprintf(w, "  (records: %s/*.json; CDI specs: %s)\n", n.RecordDir, n.CDIRoot)
	}
	daemons, err := r.client.CoreV1().Pods(harness.MPSNamespace).List(r.ctx, metav1.ListOptions{})
	if err != nil || len(daemons.Items) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "  MPS control daemon Pods the plugins started, one per GPU that holds fractions (the stand-in runs their containers on the host through gpufrac-mps-launcher, which chroots into each node's driver root, where test/mpsdouble is usr/bin/nvidia-cuda-mps-control; every command line below is in NVIDIA's documented MPS v3 grammar, which the double alone accepts):\n")
	for _, d := range daemons.Items {
		_, _ = fmt.Fprintf(w, "      %s/%s on %s for GPU %s\n", d.Namespace, d.Name, d.Spec.NodeName, d.Labels["gpufrac.dev/gpu"])
		daemonCommands(w, &d)
	}
}

// daemonCommands prints a daemon's control.log: its start, the command
// lines that shape its server and namespaces, and its clients.
func daemonCommands(w io.Writer, d *v1.Pod) {
	for _, v := range d.Spec.Volumes {
		if v.Name != "log" || v.HostPath == nil {
			continue
		}
		raw, _ := os.ReadFile(filepath.Join(v.HostPath.Path, "control.log"))
		for _, line := range strings.Split(string(raw), "\n") {
			// Probes poll "server list" and are left out.
			if _, cmd, ok := strings.Cut(line, "] "); ok && !strings.Contains(cmd, "server list") {
				_, _ = fmt.Fprintf(w, "        %s\n", cmd)
			}
		}
	}
}

// mpsRoute says how a container reaches MPS: its route (from the pipe
// directory it was given), the directory, and the limits it runs under.
func mpsRoute(env []string, mounts []specs.Mount) string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	pipe := vars["CUDA_MPS_PIPE_DIRECTORY"]
	if pipe == "" {
		return "not an MPS client"
	}
	var src string
	for _, m := range mounts {
		if m.Destination == pipe {
			src = m.Source
		}
	}
	route := "main control socket: a per-UID server of its own, own context (TimeSlicing)"
	if filepath.Base(filepath.Dir(src)) == "gpufrac" {
		route = "namespace " + filepath.Base(src) + " of server gpufrac, shared context (SMSharing)"
	}
	limits := fmt.Sprintf("request %s MiB, limit %s MiB", first(vars, "NVIDIA_GPU_MEMORY_REQUEST"), first(vars, "NVIDIA_GPU_MEMORY_LIMIT"))
	if p := vars["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; p != "" {
		limits += ", pinned " + p
	}
	return fmt.Sprintf("client via %s: %s; %s", src, route, limits)
}

// first is NAME, or the first of NAME+"S"'s per-GPU list.
func first(vars map[string]string, name string) string {
	if v := vars[name]; v != "" {
		return v
	}
	v, _, _ := strings.Cut(vars[name+"S"], ",")
	return v
}
