// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why_test

import (
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/cli/why"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const driver = "gpufrac.dev"

// cluster builds a constructed cluster: nodes of simulated GPUs published
// by the plugin's own slice model, classes, and claims already holding
// memory on named GPUs.
type cluster struct {
	t    *testing.T
	snap why.Snapshot
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t}
	c.class("gpufrac.dev", "")
	return c
}

// node adds a node of simulated GPUs (gpusim spec) with the given
// enforcement; unhealthy maps GPU index to a taint reason.
func (c *cluster) node(name, spec string, enf domain.Enforcement, unhealthy map[int]string) *cluster {
	c.t.Helper()
	// A driver with MPS v3 whatever the enforcement: the node is
	// simulated as dmem, and its enforcement then set.
	inv, err := catalog.Inventory(spec, name, domain.EnforcementDMem)
	if err != nil {
		c.t.Fatal(err)
	}
	inv.Enforcement = enf
	bad := map[string]string{}
	for _, g := range inv.GPUs {
		if r, ok := unhealthy[g.Index]; ok {
			bad[g.UUID] = r
		}
	}
	res, err := resourceslices.DriverResourcesWithHealth(name, inv, bad)
	if err != nil {
		c.t.Fatal(err)
	}
	c.snap.Slices = append(c.snap.Slices, resourceslices.Objects(driver, res)...)
	return c
}

// capacity is the published memory of a node's device.
func (c *cluster) capacity(node, device string) int64 {
	for _, s := range c.snap.Slices {
		for _, d := range s.Spec.Devices {
			if *s.Spec.NodeName == node && d.Name == device {
				v := d.Capacity[resourceslices.MemoryCapacity].Value
				return v.Value()
			}
		}
	}
	c.t.Fatalf("no device %s on %s", device, node)
	return 0
}

func (c *cluster) class(name, expr string) *cluster {
	sels := []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`}}}
	if expr != "" {
		sels = append(sels, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	c.snap.Classes = append(c.snap.Classes, &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: sels}})
	return c
}

// holding adds an allocated, prepared claim of bytes on node/device,
// reserved for pod.
func (c *cluster) holding(name, node, device string, bytes int64, pod string) *resourceapi.ResourceClaim {
	claim := claimOf(name, "gpufrac.dev", "", "")
	share := types.UID("share-" + name)
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: node, Device: device,
			ShareID: &share, ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
				resourceslices.MemoryCapacity: *resource.NewQuantity(bytes, resource.BinarySI)}}},
	}}
	if pod != "" {
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
	c.snap.Claims = append(c.snap.Claims, claim)
	return claim
}

// claimOf is an unallocated claim of one share of memory (empty: the
// class default) from class, with an optional request selector and
// FractionConfig memoryLimit.
func claimOf(name, class, memory, limit string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if memory != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			resourceslices.MemoryCapacity: resource.MustParse(memory)}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}},
	}
	if limit != "" {
		claim.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"` + limit + `"}`)}}}}}
	}
	return claim
}

// prepared records the plugin's status for every share of claim.
func prepared(t *testing.T, claim *resourceapi.ResourceClaim, data domain.DeviceData) {
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		claim.Status.Devices = append(claim.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device,
			ShareID: ptr.To(string(*r.ShareID)), Data: &runtime.RawExtension{Raw: raw},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", Message: "ok"}}})
	}
}

func pendingPod(name string, claims ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: v1.PodStatus{Phase: v1.PodPending}}
	for _, c := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return pod
}

func gi(n int64) int64 { return n << 30 }

func q(bytes int64) string { return resource.NewQuantity(bytes, resource.BinarySI).String() }
