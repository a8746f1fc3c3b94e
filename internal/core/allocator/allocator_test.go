// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package allocator_test

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/core/allocator"
)

// TestRecordedAllocationsTakeTheirDevices: allocations made elsewhere and
// recorded are taken for Feasible and Allocate alike, and Feasible records
// nothing.
func TestRecordedAllocationsTakeTheirDevices(t *testing.T) {
	ctx := context.Background()
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	slices, err := simulate.Cluster{Nodes: 2, GPUs: "h200x8"}.Slices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	whole := simulate.Pods(simulate.Generate(1, 1, resource.MustParse("141Gi")))[0].Claims[0]
	whole.Devices.Requests[0].Exactly.Capacity = nil // a whole GPU

	// Fill node-000's eight GPUs on a cluster of its own, as if another
	// scheduler had.
	one := allocator.New(slices[:1], classes)
	var filled []resourceapi.AllocationResult
	for i := range 8 {
		res, _, err := one.Allocate(ctx, claimOf(fmt.Sprintf("fill-%d", i), whole))
		if err != nil || res == nil {
			t.Fatalf("filling gpu %d: %v", i, err)
		}
		filled = append(filled, res...)
	}

	cl := allocator.New(slices, classes)
	if fit, err := cl.Feasible(ctx, claimOf("probe", whole)); err != nil || len(fit) != 2 {
		t.Fatalf("empty cluster: feasible on %v (%v), want both nodes", fit, err)
	}
	cl.Record(filled...)
	for range 2 { // Feasible records nothing: the same answer twice
		if fit, err := cl.Feasible(ctx, claimOf("probe", whole)); err != nil || len(fit) != 1 || fit[0] != "node-001" {
			t.Fatalf("with node-000 recorded full: feasible on %v (%v), want node-001", fit, err)
		}
	}
	if _, node, err := cl.Allocate(ctx, claimOf("next", whole)); err != nil || node != "node-001" {
		t.Fatalf("allocated on %q (%v), want node-001", node, err)
	}
}
