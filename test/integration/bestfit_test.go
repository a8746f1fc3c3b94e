// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBestFitInsideTheNode: the real kube-scheduler takes the first GPU in
// slice order that fits, and the plugin lists its GPUs fullest first. A
// 60Gi share takes gpu-0, a 100Gi one only fits gpu-1; once the plugin has
// prepared them, gpu-1 (41Gi free) is listed before gpu-0 (81Gi free), and
// a 20Gi share lands on gpu-1, the best fit, although gpu-0 comes first in
// name order and has room. Names, attributes and the prepared claims stay.
func TestBestFitInsideTheNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("bestfit", "")
	for _, m := range []string{"60Gi", "100Gi", "20Gi"} {
		e.createTemplate(claimTemplate("share-"+strings.ToLower(m), class, m, 1, ""))
	}
	byName := map[string]string{}
	for _, s := range e.slices(node.Name) {
		for _, d := range s.Spec.Devices {
			byName[d.Name] = stringAttr(d, "uuid")
		}
	}
	order := func() []string {
		var out []string
		for _, s := range e.slices(node.Name) {
			for _, d := range s.Spec.Devices {
				out = append(out, d.Name)
			}
		}
		return out
	}
	if got := order(); !slices.Equal(got, []string{"gpu-0", "gpu-1"}) {
		t.Fatalf("empty node publishes %v, want name order", got)
	}

	place := func(pod, template, want string) {
		t.Helper()
		e.createPod(pod, template, node.Name)
		if got := e.claimOf(e.waitRunning(pod)).Status.Allocation.Devices.Results[0].Device; got != want {
			t.Errorf("pod %s (%s) landed on %s, want %s", pod, template, got, want)
		}
	}
	place("first", "share-60gi", "gpu-0")
	place("big", "share-100gi", "gpu-1")
	since := time.Now()
	e.poll("the slice to list gpu-1 (fuller) first", func() (bool, error) {
		return slices.Equal(order(), []string{"gpu-1", "gpu-0"}), nil
	})
	t.Logf("the slice was reordered %v after the 100Gi pod was seen Running", time.Since(since).Round(10*time.Millisecond))
	for _, s := range e.slices(node.Name) {
		for _, d := range s.Spec.Devices {
			if byName[d.Name] != stringAttr(d, "uuid") {
				t.Errorf("device %s now has uuid %s, had %s: reordering must keep names", d.Name, stringAttr(d, "uuid"), byName[d.Name])
			}
		}
	}
	place("small", "share-20gi", "gpu-1")
	for _, p := range []string{"first", "big"} {
		if !running(e.pod(p)) {
			t.Errorf("pod %s is no longer Running after the reorder", p)
		}
	}

	// Once the 100Gi share leaves, gpu-1 holds 20Gi (121Gi free) and gpu-0
	// 60Gi (81Gi free): gpu-0 is listed first again.
	e.deletePod("big")
	e.poll("the slice to list gpu-0 first again", func() (bool, error) {
		return slices.Equal(order(), []string{"gpu-0", "gpu-1"}), nil
	})
}
