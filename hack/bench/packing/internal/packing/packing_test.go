// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package packing_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/hack/bench/packing/internal/packing"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

const gpuBytes = int64(141) << 30

func asks(sizes ...string) []simulate.Ask {
	var out []simulate.Ask
	for _, s := range sizes {
		q := resource.MustParse(s)
		out = append(out, simulate.Ask{Request: q, Limit: q, Whole: s == "141Gi"})
	}
	return out
}

func TestStrategies(t *testing.T) {
	trace := asks("40Gi", "40Gi", "40Gi", "70Gi", "8Gi", "8Gi", "141Gi")
	if lb := packing.LowerBound(trace, gpuBytes); lb != 3 { // 347Gi / 141Gi
		t.Errorf("lower bound %d, want 3", lb)
	}
	if o := packing.WholeGPU(trace, 16, gpuBytes); o.GPUsUsed != 7 || o.PodsPlaced != 7 || o.AtRisk != 0 {
		t.Errorf("whole GPU %+v", o)
	}
	// 40/40/40/70Gi take 3g.71gb (4 memory slices, 2 per GPU); 8Gi take
	// 1g.18gb; the whole GPU takes 7g.141gb: 3g+3g | 3g+3g | 1g+1g | 7g.
	if o := packing.MIG(trace, 16, gpuBytes); o.GPUsUsed != 4 || o.PodsPlaced != 7 {
		t.Errorf("MIG %+v, want 7 pods on 4 GPUs", o)
	}
	// Four replicas per GPU: 40+40+40+70 = 190Gi on the first GPU and
	// 8+8+141 = 157Gi on the second: every pod shares an over-full GPU.
	if o := packing.TimeSlicingReplicas(trace, 16, 4, gpuBytes); o.GPUsUsed != 2 || o.AtRisk != 7 {
		t.Errorf("time-slicing %+v, want 2 GPUs and 7 pods at risk", o)
	}
	cluster := simulate.Cluster{Nodes: 2, GPUs: "h200x8"}
	slices, err := cluster.Slices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	o, err := packing.Gpufrac(context.Background(), trace, slices, classes, gpuBytes)
	if err != nil {
		t.Fatal(err)
	}
	if o.PodsPlaced != 7 || o.AtRisk != 0 || o.GPUsUsed > 4 {
		t.Errorf("gpufrac %+v, want all 7 placed on at most 4 GPUs, none at risk", o)
	}
}
