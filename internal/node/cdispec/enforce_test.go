// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec_test

import (
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The hook and the limit variables appear only where the node enforces
// per-cgroup limits: on an older-driver (mps) or a none node a container
// of a claim must start with nothing in its creation that needs
// nvmlDeviceSetMemoryLimits_v1 or cgroup v2, gpufrac's hook and NVIDIA's
// toolkit hook (which acts on NVIDIA_GPU_MEMORY_*) alike.
func TestHookAndLimitVariablesOnlyWhereEnforced(t *testing.T) {
	dev := func(enf domain.Enforcement, mode v1alpha1.ComputeMode, soft, hard int64) plan.Device {
		d := device("gpu-0", 0, "s1", soft, hard)
		d.Enforcement, d.ComputeMode = enf, mode
		if mode == v1alpha1.SMSharing {
			d.MPS = mpslayout.For("/mps", d.GPU.UUID)
		}
		return d
	}
	for _, tc := range []struct {
		name     string
		devices  []plan.Device
		wantHook []string // the hook's --gpu values; nil: no hook
		wantEnv  map[string]string
		noEnv    []string
	}{
		{
			name:     "dmem TimeSlicing 40/60Gi: hook, NVIDIA's exact variables, gpufrac's lists",
			devices:  []plan.Device{dev(domain.EnforcementDMem, v1alpha1.TimeSlicing, 40*gib, 60*gib)},
			wantHook: []string{"GPU-gpu-0=42949672960:64424509440"},
			wantEnv: map[string]string{"NVIDIA_GPU_MEMORY_REQUEST": "40960", "NVIDIA_GPU_MEMORY_LIMIT": "61440",
				"GPUFRAC_GPU_MEMORY_REQUESTS": "40960", "GPUFRAC_GPU_MEMORY_LIMITS": "61440"},
			noEnv: []string{"NVIDIA_GPU_MEMORY_REQUESTS", "NVIDIA_GPU_MEMORY_LIMITS"},
		},
		{
			name:     "dmem SMSharing: the per-cgroup limit too",
			devices:  []plan.Device{dev(domain.EnforcementDMem, v1alpha1.SMSharing, 16*gib, 24*gib)},
			wantHook: []string{"GPU-gpu-0=17179869184:25769803776"},
			wantEnv:  map[string]string{"NVIDIA_GPU_MEMORY_REQUEST": "16384", "NVIDIA_GPU_MEMORY_LIMIT": "24576"},
		},
		{
			name:     "dmem, a limit not a whole MiB: NVIDIA's variables left out, the hook exact in bytes",
			devices:  []plan.Device{dev(domain.EnforcementDMem, v1alpha1.TimeSlicing, 10*gib+512, 10*gib+512)},
			wantHook: []string{"GPU-gpu-0=10737418752:10737418752"},
			wantEnv:  map[string]string{"GPUFRAC_GPU_MEMORY_REQUESTS": "10240"},
			noEnv:    []string{"NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_LIMIT"},
		},
		{
			name: "dmem, two GPUs with different limits: no single value is exact",
			devices: []plan.Device{dev(domain.EnforcementDMem, v1alpha1.TimeSlicing, 40*gib, 60*gib),
				device("gpu-3", 3, "s2", 20*gib, 20*gib)},
			wantHook: []string{"GPU-gpu-0=42949672960:64424509440", "GPU-gpu-3=21474836480:21474836480"},
			wantEnv:  map[string]string{"GPUFRAC_GPU_MEMORY_REQUESTS": "40960,20480", "GPUFRAC_GPU_MEMORY_LIMITS": "61440,20480"},
			noEnv:    []string{"NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_LIMIT"},
		},
		{
			name: "dmem, two GPUs with the same limits: one value is exact for both",
			devices: []plan.Device{dev(domain.EnforcementDMem, v1alpha1.TimeSlicing, 20*gib, 20*gib),
				device("gpu-3", 3, "s2", 20*gib, 20*gib)},
			wantHook: []string{"GPU-gpu-0=21474836480:21474836480", "GPU-gpu-3=21474836480:21474836480"},
			wantEnv:  map[string]string{"NVIDIA_GPU_MEMORY_REQUEST": "20480", "NVIDIA_GPU_MEMORY_LIMIT": "20480"},
		},
		{
			name:    "older driver (mps), TimeSlicing without a limit: no hook, no limit variable",
			devices: []plan.Device{dev(domain.EnforcementNone, v1alpha1.TimeSlicing, 40*gib, 40*gib)},
			noEnv: []string{"NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_LIMIT", "GPUFRAC_GPU_MEMORY_REQUESTS",
				"GPUFRAC_GPU_MEMORY_LIMITS", "NVIDIA_GPU_MEMORY_REQUESTS", "NVIDIA_GPU_MEMORY_LIMITS"},
		},
		{
			name:    "older driver (mps), SMSharing: the MPS pinned limit, no hook, no NVIDIA limit variable",
			devices: []plan.Device{dev(domain.EnforcementMPS, v1alpha1.SMSharing, 16*gib, 24*gib)},
			wantEnv: map[string]string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "GPU-gpu-0=24576M"},
			noEnv:   []string{"NVIDIA_GPU_MEMORY_REQUEST", "NVIDIA_GPU_MEMORY_LIMIT"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := opts()
			o.DriverRoot = "/run/nvidia/driver"
			w, err := cdispec.NewWriter(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			spec := writeInjected(t, w, dir, &plan.Claim{UID: "uid-e", Namespace: "ns", Name: "c", Devices: tc.devices})
			env := envOf(spec)
			checkEnv(t, env, tc.wantEnv)
			for _, k := range tc.noEnv {
				if v, ok := env[k]; ok {
					t.Errorf("env has %s=%q, want it unset", k, v)
				}
			}
			var hooks int
			if spec.Hooks != nil {
				hooks = len(spec.Hooks.CreateRuntime) + len(spec.Hooks.CreateContainer) + len(spec.Hooks.StartContainer) + len(spec.Hooks.Poststart) + len(spec.Hooks.Poststop)
			}
			if tc.wantHook == nil {
				if hooks != 0 {
					t.Fatalf("hooks %+v on a node that does not enforce per-cgroup limits", spec.Hooks)
				}
				return
			}
			if hooks != 1 || len(spec.Hooks.CreateRuntime) != 1 {
				t.Fatalf("hooks %+v, want one createRuntime hook", spec.Hooks)
			}
			args := spec.Hooks.CreateRuntime[0].Args
			var gpus []string
			for i := range args {
				if args[i] == "--gpu" && i+1 < len(args) {
					gpus = append(gpus, args[i+1])
					// What the writer writes, the hook's parser reads.
					if _, err := hookarg.ParseLimit(args[i+1]); err != nil {
						t.Errorf("the hook cannot parse its argument: %v", err)
					}
				}
			}
			if !slices.Equal(gpus, tc.wantHook) {
				t.Errorf("hook --gpu %v, want %v", gpus, tc.wantHook)
			}
			if i := slices.Index(args, "--driver-root"); i < 0 || i+1 >= len(args) || args[i+1] != "/run/nvidia/driver" {
				t.Errorf("hook args %v do not pass --driver-root /run/nvidia/driver", args)
			}
		})
	}
}
