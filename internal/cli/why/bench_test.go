// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/cli/why"
	"github.com/gpufrac/gpufrac/internal/core/allocator"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// BenchmarkWhyAtScale explains a Pending 30Gi claim on 1,000 nodes x 8
// H200 where every GPU holds three 40Gi shares (24,000 claims; 21Gi free
// per GPU, so the claim is Fragmented everywhere), against the baseline of
// the scheduler's own Filter for that pod (allocator.Feasible: the
// allocated state, one allocator, an attempt on every node), interleaved
// so load on the machine hits both alike. why does that replay, diagnoses
// every node and confirms two suggestions with further replays; the
// ratio is what explaining costs over failing. Use -benchtime 3x.
func BenchmarkWhyAtScale(b *testing.B) {
	const nodes, gpus, sharesPerGPU = 1000, 8, 3
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		b.Fatal(err)
	}
	slices, err := simulate.Cluster{Nodes: nodes, GPUs: fmt.Sprintf("h200x%d", gpus)}.Slices(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var held []*resourceapi.ResourceClaim
	var results []resourceapi.AllocationResult
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			for i := range sharesPerGPU {
				name := fmt.Sprintf("%s-%s-%d", s.Spec.Pool.Name, d.Name, i)
				share := types.UID("share-" + name)
				alloc := resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name, ShareID: &share,
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{resourceslices.MemoryCapacity: resource.MustParse("40Gi")}}}}}
				held = append(held, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "load", UID: types.UID("uid-" + name)},
					Status: resourceapi.ResourceClaimStatus{Allocation: &alloc,
						ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: "p"}}}})
				results = append(results, alloc)
			}
		}
	}
	pending := claimOf("pending", classes[0].Name, "30Gi", "")
	snap := why.Snapshot{Slices: slices, Classes: classes, Claims: held}

	var explain, filter time.Duration
	var e *why.Explanation
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		cluster := allocator.New(slices, classes)
		cluster.Record(results...)
		fit, err := cluster.Feasible(ctx, pending)
		if err != nil || len(fit) != 0 {
			b.Fatalf("baseline: fits on %d nodes (%v), want none", len(fit), err)
		}
		filter += time.Since(start)

		start = time.Now()
		e, err = why.Explain(ctx, snap, why.Target{Claims: []*resourceapi.ResourceClaim{pending}})
		if err != nil {
			b.Fatal(err)
		}
		explain += time.Since(start)
	}
	b.StopTimer()
	if len(e.Nodes) != nodes || e.Nodes[0].Reasons[0].Code != why.Fragmented || len(e.Suggestions) != 2 {
		b.Fatalf("explanation: %d nodes, first %+v, %d suggestions", len(e.Nodes), e.Nodes[0].Reasons, len(e.Suggestions))
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64(explain/n)/1e6, "why-ms")
	b.ReportMetric(float64(filter/n)/1e6, "filter-ms")
	b.ReportMetric(float64(explain)/float64(filter), "why/filter")
	fmt.Printf("\n%-44s %12s\n%-44s %12s\n%-44s %12s\n%-44s %12.1f\n",
		fmt.Sprintf("1,000 nodes x 8 H200, %d shares, %d runs", len(held), b.N), "per run",
		"scheduler Filter (allocator.Feasible)", (filter / n).Round(time.Millisecond),
		"kubectl gpufrac why (internal/cli/why.Explain)", (explain / n).Round(time.Millisecond),
		"why / Filter", float64(explain)/float64(filter))
}
