// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

import (
	"fmt"
	"strconv"
	"strings"
)

// Enforcement is what a node can enforce about a share's GPU memory.
type Enforcement string

const (
	// EnforcementDMem means per-cgroup soft and hard limits through NVML
	// (nvmlDeviceSetMemoryLimits_v1, driver r615+, cgroup v2).
	EnforcementDMem Enforcement = "dmem"
	// EnforcementMPS means only the MPS server's pinned device memory limit,
	// which binds SMSharing clients alone.
	EnforcementMPS Enforcement = "mps"
	// EnforcementNone means the node can enforce nothing; claims asking for a
	// limit must fail there.
	EnforcementNone Enforcement = "none"
)

// ParseEnforcement accepts the three names the design fixes.
func ParseEnforcement(s string) (Enforcement, error) {
	switch e := Enforcement(s); e {
	case EnforcementDMem, EnforcementMPS, EnforcementNone:
		return e, nil
	}
	return "", fmt.Errorf("memory enforcement %q is not one of dmem, mps, none", s)
}

// MPS versions as published in the mpsVersion attribute.
const (
	MPSVersionV3     = "v3"
	MPSVersionLegacy = "legacy"
	MPSVersionNone   = "none"
)

// MPS server scopes, as published in the mpsServerScope attribute
// (Inventory.MPSServerScope): one daemon per GPU (the default), or one node
// server over all the node's fraction GPUs (MPS v3 only), which admits MPS
// clients on several GPUs in one claim.
const (
	MPSServerScopeGPU  = "gpu"
	MPSServerScopeNode = "node"
)

// MPSV3MinDriverMajor is the first driver branch with MPS v3 memory
// partitioning and per-cgroup limits (r615, CUDA 13.4).
const MPSV3MinDriverMajor = 615

// GPU is one physical GPU as the rest of the driver needs to know it.
type GPU struct {
	UUID                  string
	Index                 int
	Minor                 int
	ProductName           string
	Architecture          string
	Brand                 string
	CUDAComputeCapability string // "9.0"
	PCIBusID              string // "0000:3b:00.0"
	PCIeRoot              string // "pci0000:3a", empty when unknown
	MemoryBytes           uint64
	// ComputeModes is the node's policy for this GPU (see ComputeModes*),
	// set from the plugin's --sm-sharing-gpus after discovery.
	ComputeModes string
	// ServerReserveBytes is kept back from what the GPU offers for the
	// MPS server's own context, on nodes that run MPS daemons (the
	// plugin's --mps-server-reserve-mib); 0 elsewhere.
	ServerReserveBytes uint64
}

// Values of GPU.ComputeModes and of the computeModes device attribute.
const (
	// ComputeModesAny: either mode; under legacy MPS never both at once on
	// the GPU (its daemon sets EXCLUSIVE_PROCESS), under MPS v3 both.
	ComputeModesAny = "Any"
	// ComputeModesTimeSlicing and ComputeModesSMSharing reserve the GPU
	// for one mode, so DeviceClasses can keep the modes apart when
	// scheduling.
	ComputeModesTimeSlicing = "TimeSlicing"
	ComputeModesSMSharing   = "SMSharing"
)

// Inventory is everything discovery found on one node.
type Inventory struct {
	GPUs              []GPU
	DriverVersion     string // as NVML reports it, e.g. "615.23.01"
	CUDADriverVersion string // "13.4"
	Enforcement       Enforcement
	// EnforcementNote says why Enforcement is less than the driver
	// offers (e.g. dmem not delegated down the kubelet's pod cgroups);
	// empty when it is not.
	EnforcementNote string
	MPSVersion      string
	// MPSServerScope is the MPS daemons the plugin runs: MPSServerScopeNode
	// (one node server over every fraction GPU; MPS v3 only) or
	// MPSServerScopeGPU (one daemon per GPU); empty where the node runs no
	// MPS daemons.
	MPSServerScope string
	// VisibleDevicesEnvvar is what the node's NVIDIA runtime does with a
	// pod's own NVIDIA_VISIBLE_DEVICES; empty where nobody looked.
	VisibleDevicesEnvvar VisibleDevicesEnvvar
	// Skipped lists GPUs left out, with the reason, for status reporting.
	Skipped []SkippedGPU
	// MIGDevices are the MIG instances of the node's MIG-enabled GPUs,
	// offered whole beside the fraction GPUs (which never include a
	// MIG-enabled GPU).
	MIGDevices []MIGDevice
}

// SkippedGPU is a GPU discovery saw but does not offer.
type SkippedGPU struct {
	Index  int
	UUID   string
	Reason string
}

// GPUByUUID finds a GPU of this inventory.
func (inv *Inventory) GPUByUUID(uuid string) (GPU, bool) {
	for _, g := range inv.GPUs {
		if g.UUID == uuid {
			return g, true
		}
	}
	return GPU{}, false
}

// DriverMajor extracts the branch number from an NVIDIA driver version.
func DriverMajor(version string) (int, error) {
	head, _, _ := strings.Cut(version, ".")
	major, err := strconv.Atoi(head)
	if err != nil {
		return 0, fmt.Errorf("driver version %q does not start with a number", version)
	}
	return major, nil
}

// Semver turns NVIDIA's dotted versions ("535.104.05", "13.4", "9.0") into the
// semantic versions DRA version attributes require: three numeric parts and
// no leading zeros.
func Semver(version string) (string, error) {
	parts := strings.Split(version, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return "", fmt.Errorf("version %q has %d parts, want 1 to 3", version, len(parts))
	}
	out := make([]string, 3)
	for i := range out {
		out[i] = "0"
		if i >= len(parts) {
			continue
		}
		n, err := strconv.ParseUint(parts[i], 10, 32)
		if err != nil {
			return "", fmt.Errorf("version %q: part %q is not a number", version, parts[i])
		}
		out[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(out, "."), nil
}
