// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec

import (
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Names of the memory variables a container of a claim sees.
const (
	// EnvMemoryRequest and EnvMemoryLimit are NVIDIA's contract, read by
	// the container toolkit's `nvidia-cdi-hook apply-cuda-memory-limits`
	// (toolkit v1.20.1+, GPU Operator v26.7.1): one decimal integer of MiB
	// each, applied to every GPU of the container. docs/design/nvidia/toolkit.md.
	EnvMemoryRequest = "NVIDIA_GPU_MEMORY_REQUEST"
	EnvMemoryLimit   = "NVIDIA_GPU_MEMORY_LIMIT"
	// EnvGPURequests and EnvGPULimits are gpufrac's own, informational:
	// MiB per GPU the node enforces, in the order of NVIDIA_VISIBLE_DEVICES.
	// No NVIDIA component reads them.
	EnvGPURequests = "GPUFRAC_GPU_MEMORY_REQUESTS"
	EnvGPULimits   = "GPUFRAC_GPU_MEMORY_LIMITS"
)

const mib = int64(1) << 20

// EnforcedGPUs are the claim's per-GPU limits that the node enforces on
// the container's own cgroup (memoryEnforcement dmem). Shares on a node
// that cannot (mps, none) are left out: for them the spec carries no hook
// and no limit variable, so nothing in the container's creation can fail
// on a driver or cgroup that lacks per-cgroup limits.
func EnforcedGPUs(c *plan.Claim) []plan.GPULimits {
	enforced := &plan.Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	for _, d := range c.Devices {
		if d.Enforcement == domain.EnforcementDMem {
			enforced.Devices = append(enforced.Devices, d)
		}
	}
	return enforced.PerGPU()
}

// limitEnv is the memory environment of a container of c: gpufrac's
// per-GPU lists, and NVIDIA's singular variables where one MiB value is
// exact for every GPU of the container (NVIDIA's hook applies the same
// value to each GPU, and in MiB). When a value is not exact the singular
// variables are left out, so NVIDIA's hook, if the node runs it, does
// nothing rather than set a limit other than gpufrac's; gpufrac's hook
// arguments, in bytes per GPU, stay authoritative.
func limitEnv(c *plan.Claim) []string {
	gpus := EnforcedGPUs(c)
	if len(gpus) == 0 {
		return nil
	}
	requests, limits := make([]string, len(gpus)), make([]string, len(gpus))
	exact := true
	for i, g := range gpus {
		requests[i] = strconv.FormatInt(MiB(g.SoftLimitBytes), 10)
		limits[i] = strconv.FormatInt(MiB(g.HardLimitBytes), 10)
		exact = exact && g.SoftLimitBytes%mib == 0 && g.HardLimitBytes%mib == 0 &&
			g.SoftLimitBytes == gpus[0].SoftLimitBytes && g.HardLimitBytes == gpus[0].HardLimitBytes
	}
	out := []string{EnvGPURequests + "=" + strings.Join(requests, ","), EnvGPULimits + "=" + strings.Join(limits, ",")}
	if exact {
		out = append(out, EnvMemoryRequest+"="+requests[0], EnvMemoryLimit+"="+limits[0])
	}
	return out
}

// hook applies the claim's limits when the container is created, or is
// nil when the node enforces none of them per cgroup. The values travel as
// arguments, per GPU, so they are exact whatever the container's
// environment says. A createRuntime hook: it runs after the container's
// cgroup is set up, in the runtime's namespaces, where /proc/<pid>/cgroup
// gives the container's full cgroup path. A createContainer hook runs
// inside the container's cgroup namespace (private by default on cgroup
// v2), where the path reads "/" and would name the cgroup root.
func hook(c *plan.Claim, opts Options) *cdispec.Hook {
	gpus := EnforcedGPUs(c)
	if len(gpus) == 0 {
		return nil
	}
	args := []string{"gpufrac-cdi-hook", "apply"}
	for _, g := range gpus {
		// Plans hold limits above zero (internal/core/plan bounds them).
		args = append(args, hookarg.Flag, hookarg.FormatLimit(hookarg.Limit{UUID: g.UUID, Soft: uint64(g.SoftLimitBytes), Hard: uint64(g.HardLimitBytes)}))
	}
	if opts.DriverRoot != "" {
		args = append(args, "--driver-root", opts.DriverRoot)
	}
	if opts.RecordDir != "" {
		args = append(args, "--claim", string(c.UID), "--record-dir", opts.RecordDir)
	}
	args = append(args, opts.HookArgs...)
	return &cdispec.Hook{HookName: "createRuntime", Path: opts.HookPath, Args: args}
}
