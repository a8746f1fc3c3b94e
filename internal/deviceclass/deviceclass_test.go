// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package deviceclass_test

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/deviceclass"
	"github.com/gpufrac/gpufrac/internal/deviceclass/deviceclasstest"
)

// TestPredicates pins each predicate over the kinds of class the callers
// meet: one that only configures gpufrac (no selector: it can be given any
// driver's device), ones that only select gpufrac's devices (by driver or
// by its attributes), one that only has gpufrac's name, and another
// driver's.
func TestPredicates(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		class                       *resourceapi.DeviceClass
		selects, configures, mayUse bool
		namedAsShipped              bool
	}{
		{"config-only", deviceclasstest.Class("frac-config", "", true), false, true, true, false},
		{"selector-only, by driver", deviceclasstest.Class("frac-selector", `device.driver == "gpufrac.dev"`, false), true, false, true, false},
		{"selector-only, by attribute", deviceclasstest.Class("frac-h100", `device.attributes["gpufrac.dev"].productName == "NVIDIA H100"`, false), true, false, true, false},
		{"name-only", deviceclasstest.Class("shared.gpufrac.dev", `device.driver == "gpu.nvidia.com"`, false), false, false, false, true},
		{"foreign", deviceclasstest.Class("gpu.nvidia.com", `device.driver == "gpu.nvidia.com"`, false), false, false, false, false},
		{"shipped", deviceclasstest.Class("sm-sharing.gpufrac.dev", `device.driver == "gpufrac.dev"`, true), true, true, true, true},
		{"no selector, no config", deviceclasstest.Class("anything", "", false), false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := [4]bool{deviceclass.SelectsGpufrac(tc.class), deviceclass.ConfiguresGpufrac(tc.class),
				deviceclass.MayUseGpufrac(tc.class), deviceclass.NamedAsShipped(tc.class.Name)}
			want := [4]bool{tc.selects, tc.configures, tc.mayUse, tc.namedAsShipped}
			if got != want {
				t.Errorf("selects, configures, may use, named as shipped = %v, want %v", got, want)
			}
		})
	}
}

func TestNamesDecidesByName(t *testing.T) {
	ours := deviceclass.Names([]*resourceapi.DeviceClass{
		deviceclasstest.Class("frac", `device.driver == "gpufrac.dev"`, false), deviceclasstest.Class("nic", `device.driver == "nic.example.com"`, false),
	}, deviceclass.SelectsGpufrac)
	if !ours("frac") || ours("nic") || ours("gpufrac.dev") {
		t.Errorf("frac %t, nic %t, unknown gpufrac.dev %t; want true, false, false", ours("frac"), ours("nic"), ours("gpufrac.dev"))
	}
}

func TestRequestsWalksExactAndSubrequests(t *testing.T) {
	mem := &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}
	spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "mon", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "frac", AdminAccess: ptr.To(true)}},
			{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "small", DeviceClassName: "frac", Capacity: mem},
				{Name: "nic", DeviceClassName: "nic"},
			}},
		},
		Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpufrac.dev"}}}},
	}}
	var all []string
	for r := range deviceclass.Requests(spec) {
		all = append(all, r.Name)
		if r.Name == "mon" && (!r.AdminAccess || r.Sub != -1 || r.Index != 0) {
			t.Errorf("exact request %+v", r)
		}
		if r.Name == "gpu/small" && (r.Parent != "gpu" || r.Index != 1 || r.Sub != 0 || r.Capacity != mem) {
			t.Errorf("subrequest %+v", r)
		}
	}
	if !slices.Equal(all, []string{"mon", "gpu/small", "gpu/nic"}) {
		t.Errorf("requests %v", all)
	}
	var ours []string
	for r := range deviceclass.GpufracRequests(spec, func(c string) bool { return c == "frac" }) {
		ours = append(ours, r.Name)
	}
	if !slices.Equal(ours, []string{"mon", "gpu/small"}) {
		t.Errorf("gpufrac requests %v", ours)
	}
	if !deviceclass.CarriesGpufracConfig(spec) || deviceclass.CarriesGpufracConfig(&resourceapi.ResourceClaimSpec{}) || deviceclass.CarriesGpufracConfig(nil) {
		t.Error("CarriesGpufracConfig")
	}
	for range deviceclass.Requests(nil) {
		t.Error("a nil spec has requests")
	}
}
