// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestSliceSaysWhatTheNodeEnforces: every device says in plain words what
// holds a share's guarantee and what caps each compute mode, per node
// generation, each value whole within the API's 64 characters: an older
// driver (or cgroup v1) says the guarantee is the scheduler's alone, no
// hard limit for TimeSlicing, and the legacy MPS limit for SMSharing, which
// a tenant can undo.
func TestSliceSaysWhatTheNodeEnforces(t *testing.T) {
	for _, tc := range []struct {
		enf                      domain.Enforcement
		mps                      string
		guarantee, ts, smSharing string
	}{
		{domain.EnforcementDMem, domain.MPSVersionV3, domain.GuaranteeSchedulerAndEviction, domain.LimitPerCgroup, domain.LimitPerCgroup},
		{domain.EnforcementDMem, domain.MPSVersionNone, domain.GuaranteeSchedulerOnly, domain.LimitPerCgroup, domain.LimitRefusedNoMPS},
		{domain.EnforcementMPS, domain.MPSVersionLegacy, domain.GuaranteeSchedulerOnly, domain.LimitNone, domain.LimitLegacyMPS},
		{domain.EnforcementMPS, domain.MPSVersionV3, domain.GuaranteeSchedulerOnly, domain.LimitNone, domain.LimitLegacyMPS},
		{domain.EnforcementNone, domain.MPSVersionNone, domain.GuaranteeSchedulerOnly, domain.LimitNone, domain.LimitRefusedNoMPS},
	} {
		inv := discover(t, "h200x1", tc.enf)
		inv.MPSVersion = tc.mps
		dev, err := resourceslices.Device(inv.GPUs[0], inv)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[resourceapi.QualifiedName]string{
			resourceslices.AttrGuaranteeHeldBy: tc.guarantee, resourceslices.AttrTimeSlicingLimit: tc.ts, resourceslices.AttrSMSharingLimit: tc.smSharing,
		} {
			got := ptr.Deref(dev.Attributes[name].StringValue, "")
			if got != want || len(want) > resourceapi.DeviceAttributeMaxValueLength {
				t.Errorf("%s/%s: %s = %q, want %q (at most %d characters)", tc.enf, tc.mps, name, got, want, resourceapi.DeviceAttributeMaxValueLength)
			}
		}
	}
}
