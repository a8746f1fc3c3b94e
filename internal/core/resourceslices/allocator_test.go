// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices_test

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/allocator"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const (
	driver    = "gpufrac.dev"
	nodeName  = "node-a"
	className = "gpufrac.dev"
)

// cluster places claims one at a time with the scheduler's allocator.
type cluster struct {
	t *testing.T
	*allocator.Cluster
}

func newCluster(t *testing.T, spec string) *cluster {
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New(spec, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem})
	if err != nil {
		t.Fatal(err)
	}
	res, err := resourceslices.DriverResources(nodeName, inv)
	if err != nil {
		t.Fatal(err)
	}
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`},
		}}},
	}
	return &cluster{t: t, Cluster: allocator.New(resourceslices.Objects(driver, res), []*resourceapi.DeviceClass{class})}
}

// allocate returns nil when the claim does not fit, as the scheduler sees it.
func (c *cluster) allocate(claim *resourceapi.ResourceClaim) *resourceapi.AllocationResult {
	c.t.Helper()
	results, _, err := c.Allocate(context.Background(), claim)
	if err != nil {
		c.t.Fatalf("allocating %s: %v", claim.Name, err)
	}
	if results == nil {
		return nil
	}
	return &results[0]
}

func memoryClaim(name string, memory string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: className, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if memory != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			resourceslices.MemoryCapacity: resource.MustParse(memory),
		}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}},
		}},
	}
}

func onlyResult(t *testing.T, a *resourceapi.AllocationResult) resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	if a == nil {
		t.Fatal("claim was not allocated")
	}
	if len(a.Devices.Results) != 1 {
		t.Fatalf("got %d results, want 1", len(a.Devices.Results))
	}
	return a.Devices.Results[0]
}

func consumed(r resourceapi.DeviceRequestAllocationResult) string {
	q, ok := r.ConsumedCapacity[resourceslices.MemoryCapacity]
	if !ok {
		return "<none>"
	}
	return q.String()
}

func TestAllocatorPacksSharesByMemory(t *testing.T) {
	c := newCluster(t, "h200x2")
	shareIDs := sets.New[types.UID]()
	for i := range 3 {
		r := onlyResult(t, c.allocate(memoryClaim(fmt.Sprintf("share-%d", i), "40Gi")))
		if r.Device != "gpu-0" || r.Pool != nodeName || r.Driver != driver {
			t.Errorf("claim %d: got %s/%s/%s, want %s/%s/gpu-0", i, r.Driver, r.Pool, r.Device, driver, nodeName)
		}
		if r.ShareID == nil {
			t.Fatalf("claim %d: no share ID on a multi-allocatable device", i)
		}
		shareIDs.Insert(*r.ShareID)
		if got := consumed(r); got != "40Gi" {
			t.Errorf("claim %d: consumed memory %s, want 40Gi", i, got)
		}
	}
	if shareIDs.Len() != 3 {
		t.Errorf("share IDs are not distinct: %v", sets.List(shareIDs))
	}
	// 141Gi - 120Gi leaves 21Gi on gpu-0: the fourth 40Gi goes to gpu-1.
	if r := onlyResult(t, c.allocate(memoryClaim("share-3", "40Gi"))); r.Device != "gpu-1" {
		t.Errorf("fourth claim landed on %s, want gpu-1", r.Device)
	}
	// A share that fits in the rest of gpu-0.
	if r := onlyResult(t, c.allocate(memoryClaim("small", "20Gi"))); r.Device != "gpu-0" {
		t.Errorf("20Gi claim landed on %s, want gpu-0 (21Gi free)", r.Device)
	}
	if a := c.allocate(memoryClaim("too-big", "200Gi")); a != nil {
		t.Errorf("200Gi claim was allocated on a 141Gi GPU: %+v", a.Devices.Results)
	}
}

func TestAllocatorWholeGPUWhenNoMemoryNamed(t *testing.T) {
	c := newCluster(t, "h200x2")
	r := onlyResult(t, c.allocate(memoryClaim("whole", "")))
	if got := consumed(r); got != "141Gi" {
		t.Errorf("claim without memory consumed %s, want the whole GPU 141Gi", got)
	}
	// Nothing else fits beside it on that GPU.
	if r2 := onlyResult(t, c.allocate(memoryClaim("next", "1Gi"))); r2.Device == r.Device {
		t.Errorf("a 1Gi claim shared %s with a whole-GPU claim", r.Device)
	}
}

func TestAllocatorRoundsRequestsToPolicy(t *testing.T) {
	for _, tc := range []struct{ request, want string }{
		{"20000Mi", "20224Mi"}, // KAI's gpu-memory in MiB rounds up to the 256Mi step
		{"100Mi", "1Gi"},       // below the minimum share
		{"40Gi", "40Gi"},       // on the grid already
	} {
		t.Run(tc.request, func(t *testing.T) {
			c := newCluster(t, "h200x1")
			r := onlyResult(t, c.allocate(memoryClaim("c", tc.request)))
			if got := consumed(r); got != tc.want {
				t.Errorf("request %s consumed %s, want %s", tc.request, got, tc.want)
			}
		})
	}
}
