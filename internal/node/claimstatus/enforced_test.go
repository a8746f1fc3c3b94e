// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestStatusSaysWhatAnOlderDriverEnforces: `kubectl describe
// resourceclaim` (status.devices: the Ready condition's message and the
// data's enforced) says plainly, per share, what the node does and does
// not enforce: on a node without per-cgroup limits (driver before r615, or
// cgroup v1) the guarantee is the scheduler's alone, a TimeSlicing share
// has no hard limit, an SMSharing share has the legacy MPS limit, which a
// tenant can undo; a monitor (adminAccess) gets no limit and is not
// counted.
func TestStatusSaysWhatAnOlderDriverEnforces(t *testing.T) {
	legacy := mpslayout.For("/mps", "GPU-0")
	v3 := mpslayout.For("/mps", "GPU-0")
	v3.Version = domain.MPSVersionV3
	dev := func(mode v1alpha1.ComputeMode, enf domain.Enforcement, mps *mpslayout.Binding) plan.Device {
		return plan.Device{Request: "gpu", Pool: "n", Device: "gpu-0", ShareID: ptr.To(types.UID("s")), GPU: domain.GPU{UUID: "GPU-0"},
			SoftLimitBytes: 8 << 30, HardLimitBytes: 8 << 30, ComputeMode: mode, Enforcement: enf, MPS: mps}
	}
	for _, tc := range []struct {
		name               string
		dev                plan.Device
		message, enforced  []string
		notInMessageOrData string
	}{{
		name:     "TimeSlicing on a node without per-cgroup limits",
		dev:      dev(v1alpha1.TimeSlicing, domain.EnforcementNone, nil),
		message:  []string{"8Gi guaranteed by the scheduler", "no hard limit", "driver before r615, or cgroup v1"},
		enforced: []string{"held by the scheduler only", "no hard limit", "can allocate the whole GPU"},
	}, {
		name:     "SMSharing under legacy MPS",
		dev:      dev(v1alpha1.SMSharing, domain.EnforcementMPS, legacy),
		message:  []string{"8Gi guaranteed by the scheduler", "8Gi legacy MPS pinned limit", "a tenant can undo that limit"},
		enforced: []string{"held by the scheduler only", "legacy MPS pinned-memory limit, which a tenant can undo", "driver before r615, or cgroup v1"},
	}, {
		name:               "per-cgroup limits with MPS v3",
		dev:                dev(v1alpha1.TimeSlicing, domain.EnforcementDMem, v3),
		message:            []string{"8Gi guaranteed, 8Gi limit enforced by dmem"},
		enforced:           []string{"upheld on the GPU by MPS eviction", "hard per-container limit"},
		notInMessageOrData: "scheduler only",
	}, {
		name:     "a monitor (adminAccess)",
		dev:      plan.Device{Request: "mon", Pool: "n", Device: "gpu-0", GPU: domain.GPU{UUID: "GPU-0"}, Enforcement: domain.EnforcementNone, AdminAccess: true},
		message:  []string{"for monitoring (adminAccess)", "no memory limit", "not counted"},
		enforced: []string{domain.AdminEnforced},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := claimstatus.DeviceStatuses(&plan.Claim{UID: "u", Namespace: "ns", Name: "c", Devices: []plan.Device{tc.dev}}, time.Now())
			if err != nil || len(devs) != 1 {
				t.Fatalf("%v %+v", err, devs)
			}
			msg := devs[0].Conditions[0].Message
			var data domain.DeviceData
			if err := json.Unmarshal(devs[0].Data.Raw, &data); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.message {
				if !strings.Contains(msg, want) {
					t.Errorf("Ready message %q lacks %q", msg, want)
				}
			}
			for _, want := range tc.enforced {
				if !strings.Contains(data.Enforced, want) {
					t.Errorf("data.enforced %q lacks %q", data.Enforced, want)
				}
			}
			if tc.notInMessageOrData != "" && (strings.Contains(msg, tc.notInMessageOrData) || strings.Contains(data.Enforced, tc.notInMessageOrData)) {
				t.Errorf("%q / %q says %q", msg, data.Enforced, tc.notInMessageOrData)
			}
			if data.AdminAccess != tc.dev.AdminAccess {
				t.Errorf("data.adminAccess %v, want %v", data.AdminAccess, tc.dev.AdminAccess)
			}
		})
	}
}
