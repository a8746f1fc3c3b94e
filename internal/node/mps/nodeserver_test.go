// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// nodeClaim is a TimeSlicing claim of one share on each of gpus, every
// share a client of the node server over serverGPUs.
func nodeClaim(root, name string, serverGPUs []string, gpus ...string) *plan.Claim {
	c := &plan.Claim{UID: types.UID("uid-" + name), Namespace: "ns", Name: name}
	for i, g := range gpus {
		b := mpslayout.ForNodeServer(root, g, serverGPUs)
		b.Version = domain.MPSVersionV3
		c.Devices = append(c.Devices, plan.Device{
			Request: "gpu", Pool: node, Device: "gpu-" + string(rune('0'+i)), GPU: domain.GPU{UUID: g, MemoryBytes: 80 << 30},
			SoftLimitBytes: 40 << 30, HardLimitBytes: 40 << 30, ComputeMode: v1alpha1.TimeSlicing, MPS: b,
		})
	}
	return c
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// Under the node scope one daemon serves every GPU of the node: a claim
// of two GPUs and a claim of one share it, the daemon is given every GPU
// (CUDA_VISIBLE_DEVICES, allowed_devices, a compute-mode init container
// each, the double's ledger), its Pod's label is the node server's key,
// its readiness is reported per GPU, and it goes with its last claim.
func TestNodeServerServesEveryGPUOfTheNode(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	server := []string{"GPU-a", "GPU-b", "GPU-c"}
	m := v3Manager(t, client, 10*time.Second, map[string]int64{"GPU-a": 81920, "GPU-b": 81920, "GPU-c": 40960})
	pair := nodeClaim(root, "pair", server, "GPU-a", "GPU-b")
	single := nodeClaim(root, "single", server, "GPU-b")
	for _, c := range []*plan.Claim{pair, single} {
		if err := m.Acquire(ctx, *c.MPS(), c); err != nil {
			t.Fatal(err)
		}
	}
	pods := daemonPods(t, client)
	if len(pods) != 1 {
		t.Fatalf("%d daemon pods, want the one node server", len(pods))
	}
	pod := pods[0]
	if pod.Name != mps.PodName(node, mpslayout.NodeServerKey) || pod.Labels[mps.LabelGPU] != mpslayout.NodeServerKey {
		t.Errorf("pod %s labelled %q, want %s labelled %q", pod.Name, pod.Labels[mps.LabelGPU], mps.PodName(node, mpslayout.NodeServerKey), mpslayout.NodeServerKey)
	}
	daemon := pod.Spec.Containers[0]
	if got := envOf(daemon, "CUDA_VISIBLE_DEVICES"); got != "GPU-a,GPU-b,GPU-c" {
		t.Errorf("CUDA_VISIBLE_DEVICES %q, want every GPU of the server", got)
	}
	if got := envOf(daemon, "GPUFRAC_GPUS_MEMORY_MIB"); got != "GPU-a=81920,GPU-b=81920,GPU-c=40960" {
		t.Errorf("GPUFRAC_GPUS_MEMORY_MIB %q, want each GPU's memory", got)
	}
	var inits []string
	for _, c := range pod.Spec.InitContainers {
		inits = append(inits, c.Name+": "+strings.Join(c.Command[len(c.Command)-4:], " "))
	}
	if got, want := strings.Join(inits, "; "), "compute-mode: -i GPU-a -c DEFAULT; compute-mode-1: -i GPU-b -c DEFAULT; compute-mode-2: -i GPU-c -c DEFAULT"; got != want {
		t.Errorf("init containers %q, want %q", got, want)
	}
	toml, err := os.ReadFile(filepath.Join(mps.ConfigDir(*pair.MPS()), mps.ConfigTOMLFile))
	if err != nil || !strings.Contains(string(toml), `"GPU-a,GPU-b,GPU-c"`) {
		t.Errorf("mps.toml %q (%v), want allowed_devices over every GPU", toml, err)
	}
	if got := m.Users(); got[mpslayout.NodeServerKey] != 2 || len(got) != 1 {
		t.Errorf("users %v, want both claims on the node server", got)
	}
	if got := m.Ready(); len(got) != 3 || !got["GPU-a"] || !got["GPU-b"] || !got["GPU-c"] {
		t.Errorf("ready %v, want one ready entry per GPU served", got)
	}
	if err := m.Release(ctx, *pair.MPS(), pair.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Errorf("%d daemon pods while a claim still uses the node server", n)
	}
	if err := m.Release(ctx, *single.MPS(), single.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(daemonPods(t, client)); n != 0 || len(m.Ready()) != 0 {
		t.Errorf("%d daemon pods, ready %v after the last release", n, m.Ready())
	}
}

// A per-GPU daemon and the node server never serve one GPU at once: with
// claims still on one, a claim planned for the other (the plugin's scope
// changed under prepared claims) is refused with the reason, and admitted
// once the first kind's claims are gone.
func TestNodeServerAndAGPUsDaemonNeverShareAGPU(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	m := v3Manager(t, client, 10*time.Second, nil)
	perGPU := v3Claim(root, "own", "GPU-a", 8, nil)
	if err := m.Acquire(ctx, *perGPU.MPS(), perGPU); err != nil {
		t.Fatal(err)
	}
	pair := nodeClaim(root, "pair", []string{"GPU-a", "GPU-b"}, "GPU-a", "GPU-b")
	err := m.Acquire(ctx, *pair.MPS(), pair)
	if err == nil || !strings.Contains(err.Error(), "GPU GPU-a still has its own MPS daemon") || !strings.Contains(err.Error(), "--mps-server-scope changed") {
		t.Errorf("node server beside GPU-a's daemon: %v, want the refusal with its reason", err)
	}
	if err := m.Release(ctx, *perGPU.MPS(), perGPU.UID); err != nil {
		t.Fatal(err)
	}
	if err := m.Acquire(ctx, *pair.MPS(), pair); err != nil {
		t.Fatalf("node server once GPU-a's daemon is gone: %v", err)
	}
	other := v3Claim(root, "other", "GPU-b", 8, nil)
	err = m.Acquire(ctx, *other.MPS(), other)
	if err == nil || !strings.Contains(err.Error(), "the MPS node server still serves GPU GPU-b") {
		t.Errorf("GPU-b's own daemon beside the node server: %v, want the refusal", err)
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Errorf("%d daemon pods, want the node server alone", n)
	}
}
