// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"

	"github.com/gpufrac/gpufrac/templates"
)

// TestMPSReconcileDoesNotDeleteAHandedOutDaemon: reconcile finds a GPU's
// daemon unused (its users were all released), and before it removes the
// daemon, a Prepare acquires it and hands it to a claim. The daemon must
// survive: the claim's containers are about to connect to it.
func TestMPSReconcileDoesNotDeleteAHandedOutDaemon(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const ns, node, gpu = "gpufrac-system", "node-a", "GPU-a"
	root := t.TempDir()
	b := mpslayout.For(root, gpu)
	// A daemon started long ago, running and ready, that no claim uses.
	daemon := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(node, gpu), Namespace: ns, UID: "daemon-1",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
			Labels:            map[string]string{LabelComponent: ComponentValue, LabelNode: node, LabelGPU: gpu}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	client := fake.NewClientset(daemon)
	m, err := NewManager(Config{Client: client, Namespace: ns, NodeName: node, Template: templates.MPSControlDaemon,
		Image: "gpufrac/gpufrac:test", DriverRoot: "/run/nvidia/driver", Version: domain.MPSVersionLegacy, ReadyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The daemon answers its settings, as the real script does. It has
	// stopped writing before the test returns: t.TempDir's cleanup cannot
	// remove a directory it is still writing into (CI saw "directory not
	// empty").
	answered := make(chan struct{})
	defer func() {
		cancel()
		<-answered
	}()
	go func() {
		defer close(answered)
		for ctx.Err() == nil {
			if raw, err := os.ReadFile(filepath.Join(ConfigDir(*b), ConfigFile)); err == nil {
				_ = os.WriteFile(filepath.Join(ConfigDir(*b), ConfigFile+AppliedSuffix), raw, 0o644)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	claim := &plan.Claim{UID: "uid-new", Namespace: "ns", Name: "new", Devices: []plan.Device{{
		Request: "gpu", Pool: node, Device: "gpu-0", GPU: domain.GPU{UUID: gpu},
		SoftLimitBytes: 8 << 30, HardLimitBytes: 8 << 30, ComputeMode: v1alpha1.SMSharing, MPS: b,
	}}}
	handedOut := false
	m.beforeCollect = func(string) {
		// The kubelet's Prepare of a new claim, between reconcile's look
		// at the users and its removal of the daemon.
		if err := m.Acquire(ctx, *b, claim); err != nil {
			t.Errorf("Acquire: %v", err)
			return
		}
		handedOut = true
	}
	if err := m.reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if !handedOut {
		t.Fatal("the race was not staged: reconcile did not consider the daemon unused")
	}
	if _, err := client.CoreV1().Pods(ns).Get(ctx, daemon.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the daemon handed to claim %s was deleted: %v", claim.Name, err)
	}
	if got := m.Users()[gpu]; got != 1 {
		t.Errorf("users of %s: %d, want 1", gpu, got)
	}
}
