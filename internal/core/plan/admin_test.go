// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan_test

import (
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// adminClaim is claim with its results of the given requests allocated
// with adminAccess.
func adminClaim(results []result, admin []string, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	c := claim(results, configs...)
	for i, r := range c.Status.Allocation.Devices.Results {
		for _, a := range admin {
			if r.Request == a {
				c.Status.Allocation.Devices.Results[i].AdminAccess = ptr.To(true)
			}
		}
	}
	return c
}

// TestAdminAccessDeviceIsPlannedWithoutLimits: a device allocated with
// adminAccess (a monitoring pod) is planned with its GPU and nothing else,
// on a node where every ordinary share is an MPS client with per-cgroup
// limits: no limits, no MPS route, no compute mode, and it adds nothing to
// the claim's per-GPU sums, while the claim's ordinary share beside it on
// the same GPU keeps all of that. The DeviceClass's SMSharing config does
// not reach it.
func TestAdminAccessDeviceIsPlannedWithoutLimits(t *testing.T) {
	inv := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	opts := plan.Options{NodeName: node, MPSRoot: "/mps"}
	c := adminClaim([]result{
		{request: "monitor", device: "gpu-0", share: "a0000000-0000-0000-0000-000000000001", memory: "1Gi"},
		{request: "gpu", device: "gpu-0", share: "a0000000-0000-0000-0000-000000000002", memory: "10Gi"},
	}, []string{"monitor"}, config(resourceapi.AllocationConfigSourceClass, []string{"monitor"}, fc(`,"computeMode":"SMSharing"`)))
	got, err := plan.Compute(c, inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 2 {
		t.Fatalf("want 2 devices, got %+v", got.Devices)
	}
	mon, frac := got.Devices[0], got.Devices[1]
	if !mon.AdminAccess || mon.Counted() || mon.MPS != nil || mon.SoftLimitBytes != 0 || mon.HardLimitBytes != 0 ||
		mon.ComputeMode != "" || mon.Enforcement != domain.EnforcementNone || mon.GPU.UUID != "GPU-0" {
		t.Errorf("monitor device %+v: want adminAccess on GPU-0 with no limits, MPS, compute mode or enforcement", mon)
	}
	if frac.AdminAccess || !frac.Counted() || frac.MPS == nil || frac.SoftLimitBytes != 10*gib || frac.ComputeMode != v1alpha1.TimeSlicing {
		t.Errorf("fraction %+v: want a counted 10Gi TimeSlicing MPS client", frac)
	}
	per := got.PerGPU()
	if len(per) != 1 || per[0].SoftLimitBytes != 10*gib || per[0].HardLimitBytes != 10*gib {
		t.Errorf("PerGPU %+v: want GPU-0 with the fraction's 10Gi alone", per)
	}
	if got.AdminOnly() || len(got.Counted().Devices) != 1 {
		t.Errorf("AdminOnly %v, Counted %d devices: want false, 1", got.AdminOnly(), len(got.Counted().Devices))
	}
	if err := plan.CheckRecorded(got, inv, opts); err != nil {
		t.Errorf("the plan read back from the checkpoint: %v", err)
	}

	// A monitoring claim alone on a legacy-MPS GPU serving SMSharing: no
	// compute-mode conflict, either way round.
	legacy := testInventory(domain.EnforcementMPS, domain.MPSVersionLegacy)
	monOnly, err := plan.Compute(adminClaim([]result{{request: "monitor", device: "gpu-0", share: "a0000000-0000-0000-0000-000000000003", memory: "1Gi"}},
		[]string{"monitor"}), legacy, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !monOnly.AdminOnly() {
		t.Errorf("a claim of one adminAccess device is AdminOnly")
	}
	smsh := plan.Claim{UID: "other", Namespace: "ns", Name: "sm", Devices: []plan.Device{
		share("gpu-0", "s", "GPU-0", 10*gib, 10*gib, v1alpha1.SMSharing, domain.EnforcementMPS)}}
	if err := plan.CheckModeConflicts(monOnly, []plan.Claim{smsh}); err != nil {
		t.Errorf("monitor beside SMSharing claims: %v", err)
	}
	if err := plan.CheckModeConflicts(&smsh, []plan.Claim{*monOnly}); err != nil {
		t.Errorf("SMSharing claim beside a monitor: %v", err)
	}
	bad := *monOnly
	bad.Devices = append([]plan.Device(nil), monOnly.Devices...)
	bad.Devices[0].SoftLimitBytes = gib
	if err := plan.CheckRecorded(&bad, legacy, opts); err == nil || !strings.Contains(err.Error(), "adminAccess") {
		t.Errorf("a recorded adminAccess device with a limit: got %v, want refused", err)
	}
}

// TestAdminAccessRefusesClaimFractionConfig: the claim's own FractionConfig
// applied to an adminAccess request would promise limits the node does not
// apply, so the claim is refused with the reason and the config's path.
func TestAdminAccessRefusesClaimFractionConfig(t *testing.T) {
	inv := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	c := adminClaim([]result{{request: "monitor", device: "gpu-1", share: "a0000000-0000-0000-0000-000000000004", memory: "1Gi"}},
		[]string{"monitor"}, fromClaim(fc(`,"memoryLimit":"2Gi"`)))
	_, err := plan.Compute(c, inv, plan.Options{NodeName: node, MPSRoot: "/mps"})
	var invalid *plan.InvalidError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "status.allocation.devices.config[0]: Forbidden: request monitor asks for adminAccess") {
		t.Fatalf("got %v, want the claim refused naming config[0] and adminAccess", err)
	}
}
