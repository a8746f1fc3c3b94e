// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices_test

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/core/allocator"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func migNode(t *testing.T, spec string) (*domain.Inventory, []*resourceapi.ResourceSlice) {
	t.Helper()
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
	return inv, resourceslices.Objects(driver, res)
}

func classClaim(name, class, memory string) *resourceapi.ResourceClaim {
	c := memoryClaim(name, memory)
	c.Spec.Devices.Requests[0].Exactly.DeviceClassName = class
	return c
}

// Every device carries type and memoryTotalMiB; a MIG instance is one
// device, never shared, with its profile, SMs and parent.
func TestMIGDevicesInTheSlice(t *testing.T) {
	inv, slices := migNode(t, "h100x1,h100x1:mig=3g.40gb+1g.10gb")
	byName := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			byName[d.Name] = d
		}
	}
	gpu, mig := byName["gpu-0"], byName["gpu-1-mig-0-0"]
	if resourceslices.DeviceType(&gpu) != "gpu" || *gpu.Attributes[resourceslices.AttrMemoryTotalMiB].IntValue != 81920 {
		t.Errorf("gpu-0 attributes %v", gpu.Attributes)
	}
	if _, ok := byName["gpu-1"]; ok {
		t.Error("the MIG-enabled GPU is offered for fractions")
	}
	if resourceslices.DeviceType(&mig) != "mig" || resourceslices.IsFractionTarget(&mig) {
		t.Errorf("MIG instance type %q", resourceslices.DeviceType(&mig))
	}
	if mig.AllowMultipleAllocations != nil && *mig.AllowMultipleAllocations {
		t.Error("a MIG instance allows multiple allocations")
	}
	if got := *mig.Attributes[resourceslices.AttrMIGProfile].StringValue; got != "3g.40gb" {
		t.Errorf("profile %q", got)
	}
	if got := *mig.Attributes[resourceslices.AttrMemoryTotalMiB].IntValue; got != 40960 {
		t.Errorf("memoryTotalMiB %d", got)
	}
	if got := mig.Capacity[resourceslices.MultiprocessorsCapacity].Value; got.Value() != 48 {
		t.Errorf("multiprocessors %s", got.String())
	}
	if got := *mig.Attributes[resourceslices.AttrParentUUID].StringValue; got != inv.MIGDevices[0].Parent.UUID {
		t.Errorf("parentUUID %q", got)
	}
	// A device of an older plugin (no type) is a gpu.
	old := gpu.DeepCopy()
	delete(old.Attributes, resourceslices.AttrType)
	if !resourceslices.IsFractionTarget(old) {
		t.Error("a device without type is not a fraction target")
	}
}

// The shipped DeviceClasses, through the scheduler's allocator: fraction
// classes never pick a MIG instance, even when the fraction GPU is full;
// mig.gpufrac.dev picks instances only, each once; a device without the
// type attribute (an older plugin's slice) still serves fractions.
func TestShippedClassesKeepFractionsOffMIG(t *testing.T) {
	_, slices := migNode(t, "h100x1,h100x1:mig=3g.40gb+1g.10gb")
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == "gpu-0" {
				delete(s.Spec.Devices[i].Attributes, resourceslices.AttrType)
			}
		}
	}
	c := allocator.New(slices, classes)
	place := func(claim *resourceapi.ResourceClaim) string {
		t.Helper()
		results, _, err := c.Allocate(context.Background(), claim)
		if err != nil {
			t.Fatalf("allocating %s: %v", claim.Name, err)
		}
		if results == nil {
			return ""
		}
		return results[0].Devices.Results[0].Device
	}
	for _, class := range []string{"gpufrac.dev", "sm-sharing.gpufrac.dev"} {
		if got := place(classClaim("f-"+class, class, "40Gi")); got != "gpu-0" {
			t.Errorf("%s claim landed on %q, want gpu-0", class, got)
		}
	}
	// gpu-0 (80Gi) is full: a fraction that fits an instance's memory
	// still finds no device rather than a MIG instance.
	if got := place(classClaim("f-more", "gpufrac.dev", "5Gi")); got != "" {
		t.Errorf("a fraction landed on %s beside a full GPU", got)
	}
	got := map[string]bool{}
	for _, n := range []string{"m1", "m2"} {
		got[place(classClaim(n, "mig.gpufrac.dev", ""))] = true
	}
	if !got["gpu-1-mig-0-0"] || !got["gpu-1-mig-1-0"] {
		t.Errorf("MIG claims landed on %v, want both instances", got)
	}
	if d := place(classClaim("m3", "mig.gpufrac.dev", "")); d != "" {
		t.Errorf("a third MIG claim shared instance %s", d)
	}
}
