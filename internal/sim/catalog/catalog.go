// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package catalog is the simulated GPU catalogue: the models the simulator
// offers (--simulate-gpus, kubectl gpufrac simulate), the driver facts a
// simulated node reports, and the inventory such a node discovers.
package catalog

import (
	"crypto/sha1" // RFC 4122 version 5 UUIDs are defined over SHA-1; nothing here is secret.
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Model is one GPU model the simulator offers (--simulate-gpus,
// kubectl gpufrac simulate): what NVML reports for it. The values are those
// of go-nvml's mock presets (github.com/NVIDIA/go-nvml v0.13.4-1,
// pkg/nvml/mock/gpus) as discovery reads them; internal/sim/gpusim maps the
// same names to the presets and its tests hold both equal.
type Model struct {
	Name                  string
	ProductName           string
	Architecture          string
	Brand                 string
	CUDAComputeCapability string
	MemoryBytes           uint64
}

const mib = 1 << 20

// simulatedModels is the catalog, keyed by the short name of the spec
// ("h200x8"); the SXM parts are what go-nvml's DGX mocks are built from.
// Read-only.
var simulatedModels = map[string]Model{
	"h200":     {ProductName: "NVIDIA H200 141GB HBM3e", Architecture: "Hopper", Brand: "Nvidia", CUDAComputeCapability: "9.0", MemoryBytes: 144384 * mib},
	"h100":     {ProductName: "NVIDIA H100 80GB HBM3", Architecture: "Hopper", Brand: "Nvidia", CUDAComputeCapability: "9.0", MemoryBytes: 81920 * mib},
	"a100":     {ProductName: "NVIDIA A100-SXM4-80GB", Architecture: "Ampere", Brand: "Nvidia", CUDAComputeCapability: "8.0", MemoryBytes: 81920 * mib},
	"a100-40g": {ProductName: "Mock NVIDIA A100-SXM4-40GB", Architecture: "Ampere", Brand: "Nvidia", CUDAComputeCapability: "8.0", MemoryBytes: 40960 * mib},
	"b200":     {ProductName: "NVIDIA B200 180GB HBM3e", Architecture: "Blackwell", Brand: "Nvidia", CUDAComputeCapability: "10.0", MemoryBytes: 184320 * mib},
	"a30":      {ProductName: "NVIDIA A30-PCIE-24GB", Architecture: "Ampere", Brand: "Nvidia", CUDAComputeCapability: "8.0", MemoryBytes: 24576 * mib},
}

// Simulated driver facts. A dmem node runs a driver branch with per-cgroup
// memory limits and MPS v3 (r615, CUDA 13.4); mps and none nodes run an
// older branch, with legacy MPS or without it, as such nodes do.
const (
	DriverVersion        = "615.23.01"
	CUDADriverVersion    = "13.4"
	OldDriverVersion     = "570.86.10"
	OldCUDADriverVersion = "12.8"
)

// Models lists the model names ParseGPUs accepts.
func Models() []string {
	names := make([]string, 0, len(simulatedModels))
	for n := range simulatedModels {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ModelByName looks a model of the catalog up.
func ModelByName(name string) (Model, bool) {
	m, ok := simulatedModels[name]
	m.Name = name
	return m, ok
}

// Group is a run of identical simulated GPUs.
type Group struct {
	Model string
	Count int
	// MIG, when set, turns MIG mode on for every GPU of the group and
	// configures one instance per profile name, in order (NVIDIA's
	// profile names, e.g. "3g.40gb"; a GPU instance with one compute
	// instance spanning it).
	MIG []string
}

// ParseGPUs reads a spec such as "h200x8", "h100x4,a100x4", or with a MIG
// layout "h100x2,a100x1:mig=3g.40gb+2g.20gb+1g.10gb" (the profiles of
// every GPU of that group, joined by "+").
func ParseGPUs(spec string) ([]Group, error) {
	var groups []Group
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(strings.ToLower(part))
		part, layout, hasLayout := strings.Cut(part, ":")
		var mig []string
		if hasLayout {
			profiles, ok := strings.CutPrefix(layout, "mig=")
			if !ok || profiles == "" {
				return nil, fmt.Errorf("simulated GPUs %q: %q is not a MIG layout (want mig=PROFILE+PROFILE..., e.g. mig=3g.40gb+1g.10gb)", spec, layout)
			}
			mig = strings.Split(profiles, "+")
		}
		model, countStr, ok := strings.Cut(part, "x")
		if !ok {
			return nil, fmt.Errorf("simulated GPUs %q: %q is not MODELxCOUNT (e.g. h200x8)", spec, part)
		}
		if _, known := simulatedModels[model]; !known {
			return nil, fmt.Errorf("simulated GPUs %q: unknown model %q, known: %s", spec, model, strings.Join(Models(), ", "))
		}
		count, err := strconv.Atoi(countStr)
		if err != nil || count < 1 || count > 256 {
			return nil, fmt.Errorf("simulated GPUs %q: count %q must be a number from 1 to 256", spec, countStr)
		}
		groups = append(groups, Group{Model: model, Count: count, MIG: mig})
	}
	return groups, nil
}

// GPUUUID is the UUID of a node's simulated GPU: derived from the
// node name and index so that a restarted plugin on the same node sees the
// same GPUs, as it would on real hardware, and two simulated nodes differ.
// It is the RFC 4122 version 5 UUID of "gpufrac/<node>/<index>" in the OID
// namespace.
func GPUUUID(nodeName string, index int) string {
	// The OID namespace, 6ba7b812-9dad-11d1-80b4-00c04fd430c8 (RFC 4122 C).
	ns := []byte{0x6b, 0xa7, 0xb8, 0x12, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(ns)
	fmt.Fprintf(h, "gpufrac/%s/%d", nodeName, index)
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	x := hex.EncodeToString(u)
	return "GPU-" + x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// MIGUUID is the UUID of a simulated MIG instance: derived, like GPUUUID,
// from the node, the parent GPU's index and the instance's ids, so a
// restarted plugin sees the same instances and a recreated one (new ids)
// differs.
func MIGUUID(nodeName string, index, giID, ciID int) string {
	u := GPUUUID(fmt.Sprintf("%s/%d/mig/%d", nodeName, index, giID), ciID)
	return "MIG-" + strings.TrimPrefix(u, "GPU-")
}

// Inventory is the inventory discovery finds on a simulated node
// whose GPUs are spec and whose memory enforcement is enforcement: the
// driver and MPS a real node of that kind has, GPUs numbered in spec order
// with the PCI bus ids go-nvml's mock server gives them (0000:<index>:00.0).
func Inventory(spec, nodeName string, enforcement domain.Enforcement) (*domain.Inventory, error) {
	groups, err := ParseGPUs(spec)
	if err != nil {
		return nil, err
	}
	inv := &domain.Inventory{Enforcement: enforcement}
	switch enforcement {
	case domain.EnforcementDMem:
		inv.DriverVersion, inv.CUDADriverVersion, inv.MPSVersion = DriverVersion, CUDADriverVersion, domain.MPSVersionV3
	case domain.EnforcementMPS:
		inv.DriverVersion, inv.CUDADriverVersion, inv.MPSVersion = OldDriverVersion, OldCUDADriverVersion, domain.MPSVersionLegacy
	case domain.EnforcementNone:
		inv.DriverVersion, inv.CUDADriverVersion, inv.MPSVersion = OldDriverVersion, OldCUDADriverVersion, domain.MPSVersionNone
	default:
		return nil, fmt.Errorf("simulated enforcement %q is not one of dmem, mps, none", enforcement)
	}
	for _, g := range groups {
		if len(g.MIG) > 0 {
			// The catalogue holds no MIG profile table: MIG layouts are
			// simulated on nodes (the plugin's --simulate-gpus, from
			// go-nvml's profiles), and this inventory places fractions.
			return nil, fmt.Errorf("simulated GPUs %q: a MIG layout is simulated by the kubelet plugin's --simulate-gpus, not here (MIG instances serve no fractions)", spec)
		}
		m := simulatedModels[g.Model]
		for range g.Count {
			i := len(inv.GPUs)
			inv.GPUs = append(inv.GPUs, domain.GPU{
				UUID:                  GPUUUID(nodeName, i),
				Index:                 i,
				Minor:                 i,
				ProductName:           m.ProductName,
				Architecture:          m.Architecture,
				Brand:                 m.Brand,
				CUDAComputeCapability: m.CUDAComputeCapability,
				PCIBusID:              fmt.Sprintf("0000:%02x:00.0", i),
				MemoryBytes:           m.MemoryBytes,
			})
		}
	}
	return inv, nil
}
