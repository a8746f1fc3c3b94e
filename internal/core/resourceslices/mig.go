// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// MIGDevice is the slice device for one MIG instance: type mig, allocated
// whole (no allowMultipleAllocations, so the scheduler gives it to one
// claim at a time), with the instance's memory and SM count as capacity
// for selectors and its profile and parent as attributes. It has no
// memoryEnforcement: NVIDIA's per-cgroup memory partitioning does not
// cover MIG, so no limit is ever offered inside an instance.
func MIGDevice(m domain.MIGDevice, inv *domain.Inventory) (resourceapi.Device, error) {
	if m.MemoryBytes>>20 == 0 {
		return resourceapi.Device{}, fmt.Errorf("MIG instance %s (%s on GPU %s) reports %d bytes of memory, less than 1 MiB", m.UUID, m.Profile, m.Parent.UUID, m.MemoryBytes)
	}
	driverVersion, err := domain.Semver(inv.DriverVersion)
	if err != nil {
		return resourceapi.Device{}, fmt.Errorf("driver version of MIG instance %s: %w", m.UUID, err)
	}
	cudaVersion, err := domain.Semver(inv.CUDADriverVersion)
	if err != nil {
		return resourceapi.Device{}, fmt.Errorf("CUDA driver version of MIG instance %s: %w", m.UUID, err)
	}
	ccVersion, err := domain.Semver(m.Parent.CUDAComputeCapability)
	if err != nil {
		return resourceapi.Device{}, fmt.Errorf("compute capability of MIG instance %s: %w", m.UUID, err)
	}
	totalMiB := int64(m.MemoryBytes >> 20)
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:                  {StringValue: ptr.To(domain.DeviceTypeMIG)},
		AttrUUID:                  {StringValue: ptr.To(m.UUID)},
		AttrMIGProfile:            {StringValue: ptr.To(truncate(m.Profile))},
		AttrParentUUID:            {StringValue: ptr.To(m.Parent.UUID)},
		AttrParentIndex:           {IntValue: ptr.To(int64(m.Parent.Index))},
		AttrProductName:           {StringValue: ptr.To(truncate(m.Parent.ProductName))},
		AttrArchitecture:          {StringValue: ptr.To(m.Parent.Architecture)},
		AttrBrand:                 {StringValue: ptr.To(m.Parent.Brand)},
		AttrCUDAComputeCapability: {VersionValue: ptr.To(ccVersion)},
		AttrDriverVersion:         {VersionValue: ptr.To(driverVersion)},
		AttrCUDADriverVersion:     {VersionValue: ptr.To(cudaVersion)},
		AttrMemoryTotalMiB:        {IntValue: ptr.To(totalMiB)},
	}
	if m.Parent.PCIBusID != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr.To(m.Parent.PCIBusID)}
	}
	return resourceapi.Device{
		Name:       m.Name(),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			// MiB-exact, so the node policy's memory <= memoryTotalMiB
			// holds by construction.
			MemoryCapacity:          {Value: *resource.NewQuantity(totalMiB<<20, resource.BinarySI)},
			MultiprocessorsCapacity: {Value: *resource.NewQuantity(int64(m.Multiprocessors), resource.DecimalSI)},
		},
	}, nil
}
