// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package allocator_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/core/allocator"
)

// shareOf is a fraction claim of memory on the default class.
func shareOf(name, memory string) *resourceapi.ResourceClaim {
	spec := simulate.Pods(simulate.Generate(1, 1, resource.MustParse("141Gi")))[0].Claims[0]
	spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		"memory": resource.MustParse(memory)}}
	return claimOf(name, spec)
}

func deviceOf(t *testing.T, res []resourceapi.AllocationResult) string {
	t.Helper()
	if len(res) != 1 || len(res[0].Devices.Results) != 1 {
		t.Fatalf("got %+v, want one claim on one device", res)
	}
	return res[0].Devices.Results[0].Device
}

// TestReplicaFollowsTheFillOrder: after a 60Gi share on gpu-0 and a 100Gi
// share that only gpu-1 could take, a 20Gi share fits on both. In name
// order the scheduler's allocator takes gpu-0 (81Gi free); in the order the
// plugin publishes (fullest first) it takes gpu-1 (41Gi free), the best
// fit, and so does the replica behind simulate.
func TestReplicaFollowsTheFillOrder(t *testing.T) {
	ctx := context.Background()
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	slices, err := simulate.Cluster{Nodes: 1, GPUs: "h200x2"}.Slices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := slices[0].DeepCopy()
	cl := allocator.New(slices, classes)
	var held []resourceapi.AllocationResult
	for _, step := range []struct{ name, memory, want string }{
		{"first", "60Gi", "gpu-0"},
		{"big", "100Gi", "gpu-1"},
		{"small", "20Gi", "gpu-1"},
		// gpu-1 has 21Gi left, gpu-0 81Gi: 30Gi fits only on gpu-0.
		{"medium", "30Gi", "gpu-0"},
		// gpu-0 now has 51Gi free, gpu-1 21Gi: the fuller one again.
		{"tiny", "8Gi", "gpu-1"},
	} {
		res, _, err := cl.Allocate(ctx, shareOf(step.name, step.memory))
		if err != nil || res == nil {
			t.Fatalf("%s: not allocated (%v)", step.name, err)
		}
		if got := deviceOf(t, res); got != step.want {
			t.Errorf("%s (%s) landed on %s, want %s", step.name, step.memory, got, step.want)
		}
		if step.name == "first" || step.name == "big" {
			held = append(held, res...)
		}
	}
	if !equalSlice(before, slices[0]) {
		t.Error("the replica changed the slices it was given")
	}

	// The same state in name order: the scheduler's allocator takes the
	// first GPU that fits, gpu-0, so the order is what decides.
	alloc, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true, PrioritizedList: true},
		allocator.AllocatedState(held...), classLister(classes), slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := alloc.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: *slices[0].Spec.NodeName}}, []*resourceapi.ResourceClaim{shareOf("small", "20Gi")})
	if err != nil || res == nil {
		t.Fatalf("name order: not allocated (%v)", err)
	}
	if got := deviceOf(t, res); got != "gpu-0" {
		t.Errorf("in name order the 20Gi share landed on %s, want gpu-0 (the first that fits)", got)
	}
}

func classLister(classes []*resourceapi.DeviceClass) allocator.ClassLister {
	l := allocator.ClassLister{}
	for _, c := range classes {
		l[c.Name] = c
	}
	return l
}

func equalSlice(a, b *resourceapi.ResourceSlice) bool {
	if len(a.Spec.Devices) != len(b.Spec.Devices) {
		return false
	}
	for i := range a.Spec.Devices {
		if a.Spec.Devices[i].Name != b.Spec.Devices[i].Name {
			return false
		}
	}
	return true
}
