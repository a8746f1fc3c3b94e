// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices_test

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const gi = int64(1) << 30

func dev(name string, capacityGi int64, typ string) resourceapi.Device {
	d := resourceapi.Device{Name: name, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		resourceslices.MemoryCapacity: {Value: *resource.NewQuantity(capacityGi*gi, resource.BinarySI)},
	}}
	if typ != "" {
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{resourceslices.AttrType: {StringValue: ptr.To(typ)}}
	}
	return d
}

func names(devs []resourceapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Name
	}
	return out
}

func TestOrderByFill(t *testing.T) {
	four := []resourceapi.Device{dev("gpu-0", 80, ""), dev("gpu-1", 80, "gpu"), dev("gpu-2", 80, ""), dev("gpu-3", 80, "")}
	for _, tc := range []struct {
		name    string
		devices []resourceapi.Device
		used    map[string]int64
		want    []string
		changed bool
	}{
		{"empty node keeps the built order", four, nil, []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, false},
		{"fullest first", four, map[string]int64{"gpu-0": 10 * gi, "gpu-1": 70 * gi, "gpu-3": 40 * gi},
			[]string{"gpu-1", "gpu-3", "gpu-0", "gpu-2"}, true},
		{"ties keep the built order", four, map[string]int64{"gpu-2": 40 * gi, "gpu-3": 40 * gi},
			[]string{"gpu-2", "gpu-3", "gpu-0", "gpu-1"}, true},
		{"a full GPU comes first (it fits nothing, the allocator passes it)", four, map[string]int64{"gpu-3": 80 * gi, "gpu-1": 8 * gi},
			[]string{"gpu-3", "gpu-1", "gpu-0", "gpu-2"}, true},
		{"by free memory, not by share: a smaller GPU with less free goes first",
			[]resourceapi.Device{dev("gpu-0", 141, ""), dev("gpu-1", 80, "")}, map[string]int64{"gpu-0": 40 * gi, "gpu-1": 0},
			[]string{"gpu-1", "gpu-0"}, true},
		{"MIG instances keep their positions",
			[]resourceapi.Device{dev("gpu-0", 80, "gpu"), dev("mig-1", 10, "mig"), dev("gpu-2", 80, "gpu")}, map[string]int64{"gpu-2": 30 * gi, "mig-1": 10 * gi},
			[]string{"gpu-2", "mig-1", "gpu-0"}, true},
		{"used of unknown devices is ignored", four, map[string]int64{"gpu-9": 30 * gi},
			[]string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.devices)
			got, changed := resourceslices.OrderByFill(tc.devices, tc.used)
			if !slices.Equal(names(got), tc.want) {
				t.Errorf("order %v, want %v", names(got), tc.want)
			}
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if !apiequality.Semantic.DeepEqual(before, tc.devices) {
				t.Error("OrderByFill changed its argument")
			}
			assertPermutation(t, tc.devices, got)
		})
	}
}

// assertPermutation: every device is still there once, under its name, with
// the same content.
func assertPermutation(t *testing.T, before, after []resourceapi.Device) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%d devices before, %d after", len(before), len(after))
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range before {
		byName[d.Name] = d
	}
	for _, d := range after {
		want, ok := byName[d.Name]
		if !ok {
			t.Errorf("device %s appeared or was duplicated", d.Name)
			continue
		}
		delete(byName, d.Name)
		if !apiequality.Semantic.DeepEqual(want, d) {
			t.Errorf("device %s changed:\nbefore %+v\nafter  %+v", d.Name, want, d)
		}
	}
}

// TestOrderResourcesKeepsDevicesWhole: the plugin's published slices, ordered
// by fill, keep every device's name, attributes, capacity and taints, and
// keep each device in its slice.
func TestOrderResourcesKeepsDevicesWhole(t *testing.T) {
	inv := discover(t, "h200x4", domain.EnforcementDMem)
	res, err := resourceslices.DriverResourcesWithHealth(nodeName, inv, map[string]string{inv.GPUs[3].UUID: "xid 79"})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int64{"gpu-2": 100 * gi, "gpu-1": 20 * gi}
	ordered := resourceslices.OrderResources(res, used)
	got := ordered.Pools[nodeName].Slices
	want := res.Pools[nodeName].Slices
	if len(got) != len(want) || len(got) != 1 {
		t.Fatalf("%d slices, want %d (one)", len(got), len(want))
	}
	if w := []string{"gpu-2", "gpu-1", "gpu-0", "gpu-3"}; !slices.Equal(names(got[0].Devices), w) {
		t.Errorf("order %v, want %v", names(got[0].Devices), w)
	}
	assertPermutation(t, want[0].Devices, got[0].Devices)
	if names(want[0].Devices)[0] != "gpu-0" {
		t.Error("OrderResources reordered the resources it was given")
	}
	if again := resourceslices.OrderResources(res, used); !apiequality.Semantic.DeepEqual(again, ordered) {
		t.Error("the same fill gave another order")
	}
}
