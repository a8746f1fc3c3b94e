// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices_test

import (
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func discover(t *testing.T, spec string, enf domain.Enforcement) *domain.Inventory {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New(spec, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: enf})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestDeviceModel(t *testing.T) {
	inv := discover(t, "h200x1", domain.EnforcementMPS)
	inv.GPUs[0].PCIeRoot = "pci0000:00"
	dev, err := resourceslices.Device(inv.GPUs[0], inv)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Name != "gpu-0" {
		t.Errorf("name %q, want gpu-0", dev.Name)
	}
	if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
		t.Error("allowMultipleAllocations must be true for shares to coexist")
	}
	str := func(name resourceapi.QualifiedName) string {
		a, ok := dev.Attributes[name]
		if !ok {
			return "<missing>"
		}
		switch {
		case a.StringValue != nil:
			return *a.StringValue
		case a.VersionValue != nil:
			return "v" + *a.VersionValue
		case a.IntValue != nil:
			return strconv.FormatInt(*a.IntValue, 10)
		}
		return "<empty>"
	}
	for name, want := range map[resourceapi.QualifiedName]string{
		"uuid":                            inv.GPUs[0].UUID,
		"productName":                     "NVIDIA H200 141GB HBM3e",
		"architecture":                    "Hopper",
		"brand":                           "Nvidia",
		"index":                           "0",
		"minor":                           "0",
		"cudaComputeCapability":           "v9.0.0",
		"driverVersion":                   "v615.23.1", // leading zero dropped: semver
		"cudaDriverVersion":               "v13.4.0",
		"memoryEnforcement":               "mps",
		"mpsVersion":                      "none",
		"resource.kubernetes.io/pciBusID": "0000:00:00.0",
		"resource.kubernetes.io/pcieRoot": "pci0000:00",
	} {
		if got := str(name); got != want {
			t.Errorf("attribute %s = %q, want %q", name, got, want)
		}
	}
	capacity := dev.Capacity[resourceslices.MemoryCapacity]
	if got := capacity.Value.String(); got != "141Gi" {
		t.Errorf("memory capacity %s, want 141Gi", got)
	}
	pol := capacity.RequestPolicy
	if pol == nil || pol.Default == nil || pol.ValidRange == nil {
		t.Fatalf("memory needs a request policy with default and range, got %+v", pol)
	}
	if pol.Default.Cmp(capacity.Value) != 0 || pol.ValidRange.Max.Cmp(capacity.Value) != 0 {
		t.Errorf("default %s and max %s must be the whole GPU %s", pol.Default, pol.ValidRange.Max, capacity.Value.String())
	}
	// The API requires default = min + n*step.
	diff := pol.Default.Value() - pol.ValidRange.Min.Value()
	if diff%pol.ValidRange.Step.Value() != 0 {
		t.Errorf("default %s is off the grid min %s step %s", pol.Default, pol.ValidRange.Min, pol.ValidRange.Step)
	}
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes and capacities, the API allows %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	for name, a := range dev.Attributes {
		if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
			t.Errorf("attribute %s is longer than %d bytes", name, resourceapi.DeviceAttributeMaxValueLength)
		}
		id := string(name)
		if i := strings.LastIndex(id, "/"); i >= 0 {
			id = id[i+1:]
		}
		if len(id) > resourceapi.DeviceMaxIDLength {
			t.Errorf("attribute identifier %q longer than %d", id, resourceapi.DeviceMaxIDLength)
		}
	}
	if errs := validation.IsDNS1123Label(dev.Name); len(errs) > 0 {
		t.Errorf("device name %q: %v", dev.Name, errs)
	}
}

func TestPublishedMemoryRoundsDownToStep(t *testing.T) {
	for _, tc := range []struct {
		total uint64
		want  string
	}{
		{144384 << 20, "141Gi"},  // H200: on the grid
		{81559 << 20, "81408Mi"}, // a real H100's odd total: 151Mi below it
		{(40 << 30) + 1, "40Gi"}, // a stray byte does not count
	} {
		got := domain.PublishedMemory(tc.total)
		if got.String() != tc.want {
			t.Errorf("PublishedMemory(%d) = %s, want %s", tc.total, got.String(), tc.want)
		}
		if got.Value()%domain.MemoryStep.Value() != 0 {
			t.Errorf("PublishedMemory(%d) = %s is not a multiple of the step", tc.total, got.String())
		}
	}
}

func TestDeviceRefusesGPUSmallerThanMinimumShare(t *testing.T) {
	inv := discover(t, "a30x1", domain.EnforcementDMem)
	inv.GPUs[0].MemoryBytes = 512 << 20
	_, err := resourceslices.Device(inv.GPUs[0], inv)
	if err == nil || !strings.Contains(err.Error(), "less than the smallest share 1Gi") {
		t.Errorf("got %v, want an error naming the minimum share", err)
	}
}

func TestDriverResourcesSplitsLargeNodes(t *testing.T) {
	for _, tc := range []struct {
		spec       string
		wantSlices []int
	}{
		{"h200x8", []int{8}},
		{"h100x64", []int{64}},
		{"h100x100", []int{64, 36}},
		{"h100x130", []int{64, 64, 2}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			inv := discover(t, tc.spec, domain.EnforcementDMem)
			res, err := resourceslices.DriverResources(nodeName, inv)
			if err != nil {
				t.Fatal(err)
			}
			pool, ok := res.Pools[nodeName]
			if !ok || len(res.Pools) != 1 {
				t.Fatalf("want one pool named after the node, got %v", res.Pools)
			}
			var got []int
			names := map[string]bool{}
			for _, s := range pool.Slices {
				got = append(got, len(s.Devices))
				for _, d := range s.Devices {
					if names[d.Name] {
						t.Errorf("device %s appears twice in the pool", d.Name)
					}
					names[d.Name] = true
				}
			}
			if len(got) != len(tc.wantSlices) {
				t.Fatalf("slice sizes %v, want %v", got, tc.wantSlices)
			}
			for i := range got {
				if got[i] != tc.wantSlices[i] {
					t.Fatalf("slice sizes %v, want %v", got, tc.wantSlices)
				}
			}
		})
	}
}

func TestDriverResourcesEmptyNodePublishesEmptyPool(t *testing.T) {
	res, err := resourceslices.DriverResources(nodeName, &domain.Inventory{DriverVersion: "615.1", CUDADriverVersion: "13.4"})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Pools[nodeName].Slices; len(s) != 1 || len(s[0].Devices) != 0 {
		t.Errorf("want one empty slice, got %+v", s)
	}
}

func TestUnhealthyGPUsAreTainted(t *testing.T) {
	inv := discover(t, "h200x2", domain.EnforcementDMem)
	res, err := resourceslices.DriverResourcesWithHealth(nodeName, inv, map[string]string{inv.GPUs[1].UUID: "XID 79: fell off the bus"})
	if err != nil {
		t.Fatal(err)
	}
	devs := res.Pools[nodeName].Slices[0].Devices
	if len(devs[0].Taints) != 0 {
		t.Errorf("healthy GPU tainted: %+v", devs[0].Taints)
	}
	want := resourceapi.DeviceTaint{Key: "gpufrac.dev/unhealthy", Value: "XID-79--fell-off-the-bus", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if len(devs[1].Taints) != 1 || devs[1].Taints[0] != want {
		t.Errorf("taints %+v, want %+v", devs[1].Taints, want)
	}
}

// A GPU with a server reserve offers its memory less the reserve, rounded
// down to the step, as capacity, default and largest request, and names
// the reserve; a reduced enforcement carries its note, cut to an
// attribute's length; without either, neither attribute appears.
func TestDeviceServerReserveAndEnforcementNote(t *testing.T) {
	inv := discover(t, "h200x1", domain.EnforcementMPS)
	plain, err := resourceslices.Device(inv.GPUs[0], inv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Attributes[resourceslices.AttrMPSServerReserveMiB]; ok {
		t.Errorf("a GPU without a reserve names one")
	}
	if _, ok := plain.Attributes[resourceslices.AttrMemoryEnforcementNote]; ok {
		t.Errorf("a node without a note carries one")
	}
	g := inv.GPUs[0]
	g.ServerReserveBytes = 1000 << 20 // not a step multiple: the rest rounds down
	inv.EnforcementNote = nvmldiscovery.DmemNotDelegatedNote("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123456789.slice")
	dev, err := resourceslices.Device(g, inv)
	if err != nil {
		t.Fatal(err)
	}
	step := uint64(domain.MemoryStep.Value())
	want := int64((g.MemoryBytes - 1000<<20) / step * step)
	c := dev.Capacity[resourceslices.MemoryCapacity]
	if c.Value.Value() != want || c.RequestPolicy.Default.Value() != want || c.RequestPolicy.ValidRange.Max.Value() != want {
		t.Errorf("capacity %s default %s max %s, want %d", c.Value.String(), c.RequestPolicy.Default.String(), c.RequestPolicy.ValidRange.Max.String(), want)
	}
	if a := dev.Attributes[resourceslices.AttrMPSServerReserveMiB]; a.IntValue == nil || *a.IntValue != 1000 {
		t.Errorf("reserve attribute %+v, want 1000", a)
	}
	note := dev.Attributes[resourceslices.AttrMemoryEnforcementNote].StringValue
	if note == nil || len(*note) != 64 || !strings.HasPrefix(*note, "dmem is not enabled in cgroup.subtree_control of kubepods") {
		t.Errorf("note %v, want the level cut to 64 characters", note)
	}
}
