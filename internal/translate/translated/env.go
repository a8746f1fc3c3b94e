// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package translated

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// podSetNVIDIAEnv are the variables a pod may not set on a container that
// uses a gpufrac claim, with why, in the order the warnings name them.
//   - NVIDIA_GPU_MEMORY_REQUEST and _LIMIT: NVIDIA's toolkit hook reads
//     them (docs/design/nvidia/toolkit.md, "The toolkit's hook and its
//     variables"), so a value the pod sets itself could override the
//     claim's limit.
//   - NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES: a node whose
//     NVIDIA runtime honours them from unprivileged containers (toolkit
//     default, accept-nvidia-visible-devices-envvar-when-unprivileged)
//     would hand the container GPUs and driver files the claim does not
//     hold; the claim's CDI spec alone sets them (docs/install.md).
var podSetNVIDIAEnv = []podSetVar{
	{"NVIDIA_GPU_MEMORY_REQUEST", memoryWhy},
	{"NVIDIA_GPU_MEMORY_LIMIT", memoryWhy},
	{"NVIDIA_VISIBLE_DEVICES", devicesWhy},
	{"NVIDIA_DRIVER_CAPABILITIES", devicesWhy},
}

type podSetVar struct{ name, why string }

const (
	memoryWhy  = "the GPU memory of a gpufrac claim is set by the driver, not by the pod"
	devicesWhy = "the GPUs and driver capabilities of a gpufrac claim come from its CDI spec, not from the pod: a node's NVIDIA runtime that honours this variable would give the container GPUs its claim does not hold"
)

// StripNVIDIAEnv removes from a container that uses a gpufrac claim the
// NVIDIA variables a pod may not set itself (podSetNVIDIAEnv) and says
// so, one warning per variable. Variables an envFrom source or the image
// sets are out of its sight: the node's runtime configuration is the
// control for those (docs/install.md).
func StripNVIDIAEnv(c *corev1.Container) []string {
	var kept []corev1.EnvVar
	var warnings []string
	for _, e := range c.Env {
		i := slices.IndexFunc(podSetNVIDIAEnv, func(v podSetVar) bool { return v.name == e.Name })
		if i >= 0 {
			warnings = append(warnings, fmt.Sprintf("container %s: removed %s: %s", c.Name, e.Name, podSetNVIDIAEnv[i].why))
			continue
		}
		kept = append(kept, e)
	}
	if len(warnings) > 0 {
		c.Env = kept
	}
	return warnings
}
