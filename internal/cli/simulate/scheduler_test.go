// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package simulate

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/deployments"
)

func TestNumFeasibleNodesToFind(t *testing.T) {
	for _, tc := range []struct{ pct, nodes, want int }{
		{0, 8, 8}, {0, 99, 99}, {0, 100, 100}, {0, 200, 100}, // at least 100 nodes
		{0, 1000, 420},  // 50% - 1000/125 = 42%
		{0, 5000, 500},  // 10%
		{0, 10000, 500}, // 5% floor
		{100, 1000, 1000}, {10, 500, 100},
	} {
		if got := (Scheduler{PercentageOfNodesToScore: tc.pct}).numFeasibleNodesToFind(tc.nodes); got != tc.want {
			t.Errorf("percentage %d, %d nodes: %d, want %d", tc.pct, tc.nodes, got, tc.want)
		}
	}
}

// TestSchedulerModel: 40 fractions of 16Gi on 8 nodes of 8 H200s, the
// harness test's case. Without packing the modelled scheduler spreads them
// over every node, where the allocator's first fit puts them on the first
// GPU: 8 GPUs; with packing they land on the lower bound (5) plus at most
// one; first fit packs too; one seed always gives the same placement.
func TestSchedulerModel(t *testing.T) {
	ctx := context.Background()
	slices, err := Cluster{Nodes: 8, GPUs: "h200x8"}.Slices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	asks := make([]Ask, 40)
	for i := range asks {
		asks[i] = Ask{Request: resource.MustParse("16Gi"), Limit: resource.MustParse("16Gi")}
	}
	pods := Pods(asks)
	nodesUsed := func(r *Result) int {
		nodes := map[string]bool{}
		for _, p := range r.Placed {
			nodes[p.Node] = true
		}
		return len(nodes)
	}
	for _, tc := range []struct {
		sched              Scheduler
		minGPUs, maxGPUs   int
		minNodes, maxNodes int
	}{
		{Scheduler{Seed: 1}, 8, 8, 8, 8},
		{Scheduler{Seed: 1, Packing: true}, 5, 6, 1, 2},
		{Scheduler{FirstFit: true}, 5, 6, 1, 1},
	} {
		res, err := RunWith(ctx, slices, classes, pods, tc.sched)
		if err != nil {
			t.Fatal(err)
		}
		s := res.Summarize()
		if s.PodsPlaced != 40 || s.GPUsUsed < tc.minGPUs || s.GPUsUsed > tc.maxGPUs || nodesUsed(res) < tc.minNodes || nodesUsed(res) > tc.maxNodes {
			t.Errorf("%s: %d pods on %d GPUs of %d nodes; want 40 on %d-%d GPUs of %d-%d nodes",
				tc.sched, s.PodsPlaced, s.GPUsUsed, nodesUsed(res), tc.minGPUs, tc.maxGPUs, tc.minNodes, tc.maxNodes)
		}
		again, err := RunWith(ctx, slices, classes, pods, tc.sched)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Placed, again.Placed) {
			t.Errorf("%s: two runs with one seed differ", tc.sched)
		}
	}
}

// TestWholeGPUIsNotAFraction: a claim without a memory request gets a GPU
// alone; the packing webhook leaves it, and so does the model.
func TestWholeGPUIsNotAFraction(t *testing.T) {
	gpu := resource.MustParse("141Gi")
	whole, frac := Pods([]Ask{{Request: gpu, Limit: gpu, Whole: true}}), Pods([]Ask{{Request: resource.MustParse("8Gi")}})
	if isFraction(whole[0].Claims) || !isFraction(frac[0].Claims) {
		t.Errorf("whole GPU counted as fraction %v, 8Gi %v", isFraction(whole[0].Claims), isFraction(frac[0].Claims))
	}
}
