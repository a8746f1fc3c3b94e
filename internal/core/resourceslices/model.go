// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package resourceslices turns a node's GPU inventory into the ResourceSlices
// the scheduler sees: one multi-allocatable device per physical GPU whose
// `memory` capacity is consumed by claims. The scheduler's allocator keeps
// the sum of guaranteed requests within that capacity; this package decides
// how requests round (the request policy) and what selectors can match
// (the attributes).
package resourceslices

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// MemoryCapacity is the consumable capacity every claim draws from
// (domain.MemoryCapacity, typed for the resource API).
const MemoryCapacity resourceapi.QualifiedName = domain.MemoryCapacity

// Attribute names published on every device (in the driver's domain unless
// qualified).
const (
	AttrUUID                  resourceapi.QualifiedName = "uuid"
	AttrProductName           resourceapi.QualifiedName = "productName"
	AttrArchitecture          resourceapi.QualifiedName = "architecture"
	AttrBrand                 resourceapi.QualifiedName = "brand"
	AttrIndex                 resourceapi.QualifiedName = "index"
	AttrMinor                 resourceapi.QualifiedName = "minor"
	AttrCUDAComputeCapability resourceapi.QualifiedName = "cudaComputeCapability"
	AttrDriverVersion         resourceapi.QualifiedName = "driverVersion"
	AttrCUDADriverVersion     resourceapi.QualifiedName = "cudaDriverVersion"
	AttrMemoryEnforcement     resourceapi.QualifiedName = "memoryEnforcement"
	AttrMPSVersion            resourceapi.QualifiedName = "mpsVersion"
	// AttrMPSServerScope is domain.Inventory.MPSServerScope: "node" where
	// one MPS v3 server serves every fraction GPU of the node, so a claim
	// whose MPS shares span GPUs can be prepared there; "gpu" where each
	// GPU has its own daemon; absent where the node runs no MPS daemons.
	AttrMPSServerScope resourceapi.QualifiedName = "mpsServerScope"
	AttrComputeModes   resourceapi.QualifiedName = "computeModes"
	// AttrNVIDIAVisibleDevicesEnvvar is domain.VisibleDevicesEnvvar:
	// whether the node's NVIDIA runtime lets a pod name GPUs itself.
	AttrNVIDIAVisibleDevicesEnvvar resourceapi.QualifiedName = "nvidiaVisibleDevicesEnvvar"
	// AttrMemoryEnforcementNote says why memoryEnforcement is less than
	// the driver offers (e.g. dmem not delegated down the pod cgroups);
	// absent when it is not.
	AttrMemoryEnforcementNote resourceapi.QualifiedName = "memoryEnforcementNote"
	// AttrMPSServerReserveMiB is what the GPU keeps back from its
	// capacity for the MPS server's context (MiB); absent when nothing.
	AttrMPSServerReserveMiB resourceapi.QualifiedName = "mpsServerReserveMiB"
	// AttrType is "gpu" for a whole GPU that serves fractions, "mig" for
	// a MIG instance allocated whole (domain.DeviceType*). A device
	// without it (a slice of an older plugin) is a gpu.
	AttrType resourceapi.QualifiedName = "type"
	// AttrMemoryTotalMiB is NVML's memory total of the GPU or MIG
	// instance, in MiB: what the node-scoped admission policy bounds the
	// memory capacity by, and what cluster-wide consumers compare.
	AttrMemoryTotalMiB resourceapi.QualifiedName = "memoryTotalMiB"
	// AttrMIGProfile, AttrParentUUID and AttrParentIndex are published on
	// MIG instances only: the profile name ("1g.10gb") and the GPU the
	// instance lives on.
	AttrMIGProfile  resourceapi.QualifiedName = "profile"
	AttrParentUUID  resourceapi.QualifiedName = "parentUUID"
	AttrParentIndex resourceapi.QualifiedName = "parentIndex"
)

// MultiprocessorsCapacity is a MIG instance's SM count, published as
// capacity so a claim can select on it; nothing consumes it.
const MultiprocessorsCapacity resourceapi.QualifiedName = "multiprocessors"

// DeviceType is the device's `type`, with a device that does not say (a
// slice written by an older plugin) read as a gpu.
func DeviceType(d *resourceapi.Device) string {
	if a, ok := d.Attributes[AttrType]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return domain.DeviceTypeGPU
}

// IsFractionTarget tells whether d is a device fractions are placed on
// (type gpu): admission, packing, status and why read those alone.
func IsFractionTarget(d *resourceapi.Device) bool { return DeviceType(d) == domain.DeviceTypeGPU }

// MaxDevicesPerSlice is the API's limit for slices whose devices carry
// taints (128 otherwise). Unhealthy GPUs get taints, so every slice stays
// within the tighter limit and never has to be split when one appears.
const MaxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Device is the slice device for one GPU.
func Device(gpu domain.GPU, inv *domain.Inventory) (resourceapi.Device, error) {
	mem := domain.OfferedMemory(gpu)
	if mem.Cmp(domain.MemoryMin) < 0 {
		return resourceapi.Device{}, fmt.Errorf("GPU %s has %d bytes of memory (%d kept back for the MPS server), less than the smallest share %s", gpu.UUID, gpu.MemoryBytes, gpu.ServerReserveBytes, domain.MemoryMin.String())
	}
	driverVersion, err := domain.Semver(inv.DriverVersion)
	if err != nil {
		return resourceapi.Device{}, fmt.Errorf("driver version of GPU %s: %w", gpu.UUID, err)
	}
	cudaVersion, err := domain.Semver(inv.CUDADriverVersion)
	if err != nil {
		return resourceapi.Device{}, fmt.Errorf("CUDA driver version of GPU %s: %w", gpu.UUID, err)
	}
	ccVersion, err := domain.Semver(gpu.CUDAComputeCapability)
	if err != nil {
		return resourceapi.Device{}, fmt.Errorf("compute capability of GPU %s: %w", gpu.UUID, err)
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:                  {StringValue: ptr.To(gpu.UUID)},
		AttrProductName:           {StringValue: ptr.To(truncate(gpu.ProductName))},
		AttrArchitecture:          {StringValue: ptr.To(gpu.Architecture)},
		AttrBrand:                 {StringValue: ptr.To(gpu.Brand)},
		AttrIndex:                 {IntValue: ptr.To(int64(gpu.Index))},
		AttrMinor:                 {IntValue: ptr.To(int64(gpu.Minor))},
		AttrCUDAComputeCapability: {VersionValue: ptr.To(ccVersion)},
		AttrDriverVersion:         {VersionValue: ptr.To(driverVersion)},
		AttrCUDADriverVersion:     {VersionValue: ptr.To(cudaVersion)},
		AttrMemoryEnforcement:     {StringValue: ptr.To(string(inv.Enforcement))},
		AttrMPSVersion:            {StringValue: ptr.To(inv.MPSVersion)},
		AttrComputeModes:          {StringValue: ptr.To(computeModes(gpu))},
		AttrType:                  {StringValue: ptr.To(domain.DeviceTypeGPU)},
		AttrMemoryTotalMiB:        {IntValue: ptr.To(int64(gpu.MemoryBytes >> 20))},
	}
	if inv.MPSServerScope != "" {
		attrs[AttrMPSServerScope] = resourceapi.DeviceAttribute{StringValue: ptr.To(inv.MPSServerScope)}
	}
	if inv.VisibleDevicesEnvvar != "" {
		attrs[AttrNVIDIAVisibleDevicesEnvvar] = resourceapi.DeviceAttribute{StringValue: ptr.To(string(inv.VisibleDevicesEnvvar))}
	}
	if gpu.ServerReserveBytes > 0 {
		attrs[AttrMPSServerReserveMiB] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(gpu.ServerReserveBytes >> 20))}
	}
	addEnforced(attrs, inv)
	if inv.EnforcementNote != "" {
		attrs[AttrMemoryEnforcementNote] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(inv.EnforcementNote))}
	}
	if gpu.PCIBusID != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr.To(gpu.PCIBusID)}
	}
	if gpu.PCIeRoot != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = resourceapi.DeviceAttribute{StringValue: ptr.To(gpu.PCIeRoot)}
	}
	return resourceapi.Device{
		Name:                     domain.DeviceName(gpu.Index),
		AllowMultipleAllocations: ptr.To(true),
		Attributes:               attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			MemoryCapacity: {
				Value: mem,
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					// A claim that names no memory gets the GPU alone.
					Default: ptr.To(mem.DeepCopy()),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min:  ptr.To(domain.MemoryMin.DeepCopy()),
						Max:  ptr.To(mem.DeepCopy()),
						Step: ptr.To(domain.MemoryStep.DeepCopy()),
					},
				},
			},
		},
	}, nil
}

func computeModes(gpu domain.GPU) string {
	if gpu.ComputeModes == "" {
		return domain.ComputeModesAny
	}
	return gpu.ComputeModes
}

// maxAttributeLength is the API's limit on string attribute values.
const maxAttributeLength = resourceapi.DeviceAttributeMaxValueLength

func truncate(s string) string {
	if len(s) > maxAttributeLength {
		return s[:maxAttributeLength]
	}
	return s
}

// TaintUnhealthy is the key of the taint an unhealthy GPU carries.
const TaintUnhealthy = "gpufrac.dev/unhealthy"

// DriverResources is what the plugin publishes for its node: one pool named
// after the node, split into slices of at most MaxDevicesPerSlice devices.
func DriverResources(nodeName string, inv *domain.Inventory) (resourceslice.DriverResources, error) {
	return DriverResourcesWithHealth(nodeName, inv, nil)
}

// DriverResourcesWithHealth also taints the GPUs in unhealthy (UUID to
// reason) NoSchedule: the scheduler places no new claims there, while
// running workloads keep their GPU until their owners act.
func DriverResourcesWithHealth(nodeName string, inv *domain.Inventory, unhealthy map[string]string) (resourceslice.DriverResources, error) {
	var slices []resourceslice.Slice
	var current []resourceapi.Device
	devices := make([]resourceapi.Device, 0, len(inv.GPUs)+len(inv.MIGDevices))
	for _, gpu := range inv.GPUs {
		dev, err := Device(gpu, inv)
		if err != nil {
			return resourceslice.DriverResources{}, err
		}
		if reason, bad := unhealthy[gpu.UUID]; bad {
			dev.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: taintValue(reason), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		devices = append(devices, dev)
	}
	for _, m := range inv.MIGDevices {
		dev, err := MIGDevice(m, inv)
		if err != nil {
			return resourceslice.DriverResources{}, err
		}
		// An XID on the parent GPU (or on the instance) taints the
		// instance: its work runs on the parent's hardware.
		reason, bad := unhealthy[m.UUID]
		if !bad {
			reason, bad = unhealthy[m.Parent.UUID]
		}
		if bad {
			dev.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: taintValue(reason), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		devices = append(devices, dev)
	}
	for _, dev := range devices {
		current = append(current, dev)
		if len(current) == MaxDevicesPerSlice {
			slices = append(slices, resourceslice.Slice{Devices: current})
			current = nil
		}
	}
	if len(current) > 0 || len(slices) == 0 {
		// An empty slice still tells the scheduler the pool exists and
		// is empty, rather than unknown.
		slices = append(slices, resourceslice.Slice{Devices: current})
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{nodeName: {Slices: slices}},
	}, nil
}

// Objects renders DriverResources as the ResourceSlice objects the
// kubeletplugin helper would create, for consumers that place claims without
// an API server (the allocator tests, the simulator).
func Objects(driverName string, resources resourceslice.DriverResources) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for poolName, pool := range resources.Pools {
		for i, s := range pool.Slices {
			out = append(out, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", poolName, driverName, i)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   driverName,
					NodeName: ptr.To(poolName),
					Pool: resourceapi.ResourcePool{
						Name:               poolName,
						Generation:         pool.Generation,
						ResourceSliceCount: int64(len(pool.Slices)),
					},
					Devices: s.Devices,
				},
			})
		}
	}
	return out
}

// taintValue fits a reason into a taint value (a label value: at most 63
// characters of letters, digits, '-', '_' and '.').
func taintValue(reason string) string {
	out := make([]byte, 0, len(reason))
	for i := 0; i < len(reason) && len(out) < 63; i++ {
		c := reason[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
			out = append(out, c)
		default:
			out = append(out, '-')
		}
	}
	return strings.Trim(string(out), "-_.")
}
