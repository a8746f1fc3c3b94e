// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/node/mps"
)

// Ready is what gpufrac_mps_daemon_ready reports: per GPU whose daemon
// claims use, whether the daemon's Pod passed its readiness probe when
// Acquire or the reconcile loop last saw it; GPUs no claim uses are absent.
func TestReadyIsTheLastSeenHealthCheck(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	m := newManager(t, client, 10*time.Second, nil)
	if got := m.Ready(); len(got) != 0 {
		t.Fatalf("Ready before any claim: %v, want nothing", got)
	}
	claim := smClaim(root, "llm", "GPU-a", 24)
	if err := m.Acquire(ctx, *claim.MPS(), claim); err != nil {
		t.Fatal(err)
	}
	setReady := func(status corev1.ConditionStatus) {
		t.Helper()
		pod, err := client.CoreV1().Pods(ns).Get(ctx, mps.PodName(node, "GPU-a"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		change func()
		want   map[string]bool
	}{
		{"acquired: Acquire waited for the probe", func() {}, map[string]bool{"GPU-a": true}},
		{"the probe fails: the next pass sees it", func() { setReady(corev1.ConditionFalse) }, map[string]bool{"GPU-a": false}},
		{"it answers again", func() { setReady(corev1.ConditionTrue) }, map[string]bool{"GPU-a": true}},
		{"the daemon is gone while the claim needs it", func() {
			if err := client.CoreV1().Pods(ns).Delete(ctx, mps.PodName(node, "GPU-a"), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{"GPU-a": false}},
	}
	for _, s := range steps {
		s.change()
		if s.name != steps[0].name {
			// A reconcile pass, as Run makes on every change of a daemon Pod.
			if err := m.Restore(ctx, nil); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
		if got := m.Ready(); !maps.Equal(got, s.want) {
			t.Errorf("%s: Ready %v, want %v", s.name, got, s.want)
		}
	}
	if err := m.Release(ctx, *claim.MPS(), claim.UID); err != nil {
		t.Fatal(err)
	}
	if got := m.Ready(); len(got) != 0 {
		t.Errorf("Ready after the last claim left: %v, want nothing (no daemon is expected)", got)
	}
}
