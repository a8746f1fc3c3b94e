// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MemoryCapacity is the name of the consumable capacity every claim draws
// from on a gpufrac device (a resource.k8s.io QualifiedName; the slices
// package gives it that type).
const MemoryCapacity = "memory"

var (
	// MemoryStep is the packing granularity: requests round up to a
	// multiple of it. 256 MiB keeps rounding waste under 0.2% of an H200
	// while KAI's MiB-sized requests (gpu-memory: "20000") still fit
	// closely (20000Mi becomes 20224Mi).
	MemoryStep = resource.MustParse("256Mi")
	// MemoryMin is the smallest share: a CUDA context alone takes several
	// hundred MiB, so a smaller share could not run anything. It is a
	// multiple of MemoryStep, which the API requires of a default that
	// equals Min + n*Step.
	MemoryMin = resource.MustParse("1Gi")
)

// DeviceName is the name of a GPU's device in the slice.
func DeviceName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// PublishedMemory is the capacity published for a GPU of total bytes: total
// rounded down to MemoryStep, because the API requires the default request
// (the whole GPU) to sit on the policy's grid. At most 255 MiB go unoffered,
// less than the driver reserves anyway.
func PublishedMemory(totalBytes uint64) resource.Quantity {
	step := uint64(MemoryStep.Value())
	return *resource.NewQuantity(int64(totalBytes/step*step), resource.BinarySI)
}

// OfferedMemory is what gpu offers to claims: its memory less the MPS
// server reserve, rounded down to MemoryStep (PublishedMemory). A reserve
// at or above the GPU's memory offers nothing; the plugin refuses such a
// reserve at start.
func OfferedMemory(gpu GPU) resource.Quantity {
	if gpu.ServerReserveBytes >= gpu.MemoryBytes {
		return *resource.NewQuantity(0, resource.BinarySI)
	}
	return PublishedMemory(gpu.MemoryBytes - gpu.ServerReserveBytes)
}

// DefaultServerReserveMiB is the default MPS server reserve per GPU. No
// NVIDIA page states the server's memory footprint; a CUDA context takes
// several hundred MiB (the reason for MemoryMin), so 1 GiB (four steps) is
// a conservative choice, inferred, that test/gpu/run.sh measures against
// the real server's context.
const DefaultServerReserveMiB = 1024
