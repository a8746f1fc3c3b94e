// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

// A node server that runs over GPU-a alone, left by a plugin that is gone
// (nothing restored uses it), meets a claim planned for the node's GPUs
// now, GPU-a and GPU-b: with nothing holding it, it is restarted over
// both; while the preparer is uncertain of its claims (a quarantined
// checkpoint entry may use it), it is kept and the claim on GPU-b refused.
func TestUnheldNodeServerRestartsOverTheNewGPUs(t *testing.T) {
	for _, uncertain := range []string{"", "1 quarantined checkpoint entry"} {
		t.Run("uncertain="+uncertain, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client := fake.NewClientset()
			root := t.TempDir()
			kubelet(ctx, t, client, true)
			cfg := mps.Config{
				Client: client, Namespace: ns, NodeName: node, Template: templates.MPSControlDaemon,
				Image: "gpufrac/gpufrac:test", DriverRoot: "/run/nvidia/driver", Version: domain.MPSVersionV3, DriverVersion: "615.23.01",
				ReadyTimeout: 10 * time.Second, GPUMemoryMiB: map[string]int64{"GPU-a": 81920, "GPU-b": 81920},
			}
			before, err := mps.NewManager(cfg)
			if err != nil {
				t.Fatal(err)
			}
			old := nodeClaim(root, "old", []string{"GPU-a"}, "GPU-a")
			if err := before.Acquire(ctx, *old.MPS(), old); err != nil {
				t.Fatal(err)
			}
			pods := daemonPods(t, client)
			if len(pods) != 1 || pods[0].Annotations[mps.AnnotationServerGPUs] != "GPU-a" {
				t.Fatalf("daemon pods %d, annotations %v: want the node server over GPU-a", len(pods), pods[0].Annotations)
			}

			// The plugin restarts knowing no claim of the server.
			cfg.KeepUnused = func() string { return uncertain }
			after, err := mps.NewManager(cfg)
			if err != nil {
				t.Fatal(err)
			}
			fresh := nodeClaim(root, "fresh", []string{"GPU-a", "GPU-b"}, "GPU-b")
			err = after.Acquire(ctx, *fresh.MPS(), fresh)
			pods = daemonPods(t, client)
			if uncertain != "" {
				var refused *mps.ServerGPUsError
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), uncertain) {
					t.Fatalf("acquire while uncertain: %v, want the refusal naming why the server is kept", err)
				}
				if len(pods) != 1 || pods[0].Annotations[mps.AnnotationServerGPUs] != "GPU-a" {
					t.Fatalf("the node server was replaced while the preparer is uncertain of its claims")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != 1 {
				t.Fatalf("daemon pods %d, want the one node server", len(pods))
			}
			if got := pods[0].Annotations[mps.AnnotationServerGPUs]; got != "GPU-a,GPU-b" {
				t.Errorf("the restarted node server says it serves %q, want GPU-a,GPU-b", got)
			}
			if got := envOf(pods[0].Spec.Containers[0], "CUDA_VISIBLE_DEVICES"); got != "GPU-a,GPU-b" {
				t.Errorf("the restarted node server sees %q, want GPU-a,GPU-b", got)
			}
		})
	}
}
