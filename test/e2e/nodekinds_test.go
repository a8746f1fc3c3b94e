// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// asNodeKind runs the real node's plugin with extra flags for the test,
// and restores it afterwards.
func (e *env) asNodeKind(extra ...string) {
	e.t.Helper()
	if err := node.RestartPluginWith(e.ctx, extra...); err != nil {
		e.t.Fatalf("restarting the plugin with %v: %v", extra, err)
	}
	e.t.Cleanup(func() {
		// Pods first: their claims were prepared by this kind of node.
		e.cleanupPods()
		if err := node.RestartPluginWith(e.ctx); err != nil {
			e.t.Errorf("restoring the plugin: %v", err)
		}
	})
}

func readSpec(t *testing.T, path string) *cdispecs.Spec {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispecs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return &spec
}

func specHooks(spec *cdispecs.Spec) []*cdispecs.Hook {
	hooks := slices.Clone(spec.ContainerEdits.Hooks)
	for _, d := range spec.Devices {
		hooks = append(hooks, d.ContainerEdits.Hooks...)
	}
	return hooks
}

// TestOlderDriverNode: on a node with a pre-r615 driver
// (--simulate-enforcement=mps: no nvmlDeviceSetMemoryLimits_v1) a
// TimeSlicing pod without a limit runs, its CDI spec carries no hook and no
// limit variable (so neither gpufrac's hook nor NVIDIA's toolkit hook can
// fail the container), and a claim with a limit is refused with the reason.
func TestOlderDriverNode(t *testing.T) {
	e := newEnv(t)
	e.asNodeKind("--simulate-enforcement=mps")
	class := e.classFor(6)
	e.createTemplate("plain", class, "20Gi", "computeMode: TimeSlicing\n")
	e.createTemplate("capped", class, "20Gi", "memoryLimit: 30Gi\ncomputeMode: TimeSlicing\n")
	e.createPod(probePod("plain", "plain"))
	pod := e.waitRunning("plain")
	g := e.gpuOf(pod)
	s := e.probe(pod)
	for _, k := range []string{"NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_LIMIT", "GPUFRAC_GPU_MEMORY_REQUESTS", "GPUFRAC_GPU_MEMORY_LIMITS"} {
		if v, ok := s.Env[k]; ok {
			t.Errorf("the container sees %s=%s on a node that enforces no per-cgroup limit", k, v)
		}
	}
	if s.Env["NVIDIA_VISIBLE_DEVICES"] != g.UUID {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %s", s.Env["NVIDIA_VISIBLE_DEVICES"], g.UUID)
	}
	if hooks := specHooks(readSpec(t, specPath(g.Claim))); len(hooks) != 0 {
		t.Errorf("the CDI spec on an older-driver node carries hooks: %+v", hooks)
	}
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	records, err := node.LimitRecords()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if strings.HasSuffix(r.Cgroup, id) {
			t.Errorf("limits were set for the container on an older-driver node: %+v", r)
		}
	}

	e.createPod(probePod("capped", "capped"))
	want := "this node enforces GPU memory limits only for SMSharing"
	e.poll("the capped pod's claim to be refused with the reason", func() (bool, error) {
		events, err := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			if strings.Contains(ev.Message, want) {
				t.Logf("%s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message)
				return true, nil
			}
		}
		return false, nil
	})
	capped, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "capped", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(capped.Status.ContainerStatuses) > 0 && capped.Status.ContainerStatuses[0].State.Running != nil {
		t.Errorf("the pod whose limit cannot be enforced runs")
	}
}

// TestGPUOperatorNode: the driver lives in the GPU Operator's driver
// container, which the host sees at <root>/run/nvidia/driver; the host has
// no NVML of its own. The plugin passes that root to the hook, which finds
// NVML there and sets the limits.
func TestGPUOperatorNode(t *testing.T) {
	e := newEnv(t)
	root := filepath.Join(filepath.Dir(node.PluginDataDir), "gpu-operator", "run", "nvidia", "driver")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// The default simulated driver root (the host's, as it were) goes: NVML
	// must come from the operator's root only.
	if err := os.RemoveAll(filepath.Join(node.PluginDataDir, "simulated-driver-root")); err != nil {
		t.Fatal(err)
	}
	// The operator's driver container has MPS: its root holds
	// usr/bin/nvidia-cuda-mps-control, where the daemon Pods chroot.
	if err := cp.InstallMPSDouble(e.ctx, root); err != nil {
		t.Fatal(err)
	}
	e.asNodeKind("--driver-root=" + root)
	// Runs before asNodeKind's restart of the plugin: the default driver
	// root gets its MPS binaries back (NVML the plugin installs itself).
	t.Cleanup(func() {
		if err := node.InstallMPSDouble(e.ctx, filepath.Join(node.PluginDataDir, "simulated-driver-root")); err != nil {
			t.Error(err)
		}
	})
	if _, err := os.Stat(filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatalf("the GPU Operator node's driver root has no NVML: %v", err)
	}
	if _, err := os.Stat(filepath.Join(node.PluginDataDir, "simulated-driver-root", "usr/lib64")); err == nil {
		t.Fatal("a driver was installed outside the GPU Operator's root")
	}
	e.createTemplate("op", e.classFor(7), "20Gi", "memoryLimit: 30Gi\n")
	e.createPod(probePod("op", "op"))
	pod := e.waitRunning("op")
	g := e.gpuOf(pod)
	e.checkSees(e.probe(pod), g, 20, 30)
	e.checkHook(pod, g, 20*gib, 30*gib)
	hooks := specHooks(readSpec(t, specPath(g.Claim)))
	if len(hooks) != 1 {
		t.Fatalf("CDI spec hooks %+v, want gpufrac-cdi-hook", hooks)
	}
	if i := slices.Index(hooks[0].Args, "--driver-root"); i < 0 || i+1 >= len(hooks[0].Args) || hooks[0].Args[i+1] != root {
		t.Errorf("the hook's args %v do not pass --driver-root %s", hooks[0].Args, root)
	}
}
