// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec_test

import (
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestAdminAccessDeviceGetsTheGPUAlone: a device allocated with
// adminAccess (a monitoring pod) gets its GPU's device node and a place in
// NVIDIA_VISIBLE_DEVICES, and no limit: alone, no hook and no limit or MPS
// variable; beside a share of another GPU in the same claim, the hook and
// the lists name the share's GPU only.
func TestAdminAccessDeviceGetsTheGPUAlone(t *testing.T) {
	mon := plan.Device{Request: "mon", Pool: "node-a", Device: "gpu-3", GPU: domain.GPU{UUID: "GPU-gpu-3", Index: 3, Minor: 3, MemoryBytes: uint64(141 * gib)},
		Enforcement: domain.EnforcementNone, AdminAccess: true}
	for _, tc := range []struct {
		name     string
		devices  []plan.Device
		visible  string
		requests string // GPUFRAC_GPU_MEMORY_REQUESTS; "" unset
		hookGPUs int
	}{
		{name: "a monitor alone", devices: []plan.Device{mon}, visible: "GPU-gpu-3"},
		{name: "a monitor beside a share", devices: []plan.Device{device("gpu-0", 0, "s1", 40*gib, 40*gib), mon},
			visible: "GPU-gpu-0,GPU-gpu-3", requests: "40960", hookGPUs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := cdispec.NewWriter(dir, opts())
			if err != nil {
				t.Fatal(err)
			}
			spec := writeInjected(t, w, dir, &plan.Claim{UID: "uid-m", Namespace: "ns", Name: "c", Devices: tc.devices})
			env := envOf(spec)
			if env["NVIDIA_VISIBLE_DEVICES"] != tc.visible {
				t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %q", env["NVIDIA_VISIBLE_DEVICES"], tc.visible)
			}
			if got, ok := env["GPUFRAC_GPU_MEMORY_REQUESTS"]; got != tc.requests || ok != (tc.requests != "") {
				t.Errorf("GPUFRAC_GPU_MEMORY_REQUESTS=%q (set %v), want %q", got, ok, tc.requests)
			}
			for _, k := range []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"} {
				if v, ok := env[k]; ok {
					t.Errorf("%s=%q: a monitor joins no MPS server", k, v)
				}
			}
			if tc.requests == "" {
				for _, k := range []string{"NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_LIMIT", "GPUFRAC_GPU_MEMORY_LIMITS"} {
					if v, ok := env[k]; ok {
						t.Errorf("%s=%q: a monitor has no limit", k, v)
					}
				}
			}
			hooks := 0
			if spec.Hooks != nil {
				hooks = len(spec.Hooks.CreateRuntime)
			}
			if want := min(tc.hookGPUs, 1); hooks != want {
				t.Errorf("%d createRuntime hooks, want %d", hooks, want)
			}
			if !slices.ContainsFunc(spec.Linux.Devices, func(d oci.LinuxDevice) bool { return d.Path == "/dev/nvidia3" }) {
				t.Errorf("no /dev/nvidia3 among %+v", spec.Linux.Devices)
			}
		})
	}
}
