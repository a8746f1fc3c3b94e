// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

import "fmt"

// Values of the `type` device attribute (DESIGN.md, "What a slice's memory
// means"): only gpu devices are fraction targets.
const (
	DeviceTypeGPU = "gpu"
	DeviceTypeMIG = "mig"
)

// MIGDevice is one MIG instance (a GPU instance with one compute instance)
// as configured on a GPU whose MIG mode is on. gpufrac offers it whole: it
// neither creates nor deletes instances, and sets no memory limit inside
// one (NVIDIA's per-cgroup memory partitioning does not cover MIG).
type MIGDevice struct {
	// UUID is the instance's own ("MIG-..."), what CUDA and NVML name it by.
	UUID string
	// Parent is the MIG-enabled GPU the instance lives on; its Minor names
	// the /dev/nvidia<minor> node a container of the instance needs, and
	// its MemoryBytes is the whole GPU's.
	Parent GPU
	// GIID and CIID are NVML's GPU instance and compute instance ids; with
	// the parent's minor they name the instance's capability devices
	// (/proc/driver/nvidia-caps/mig-minors: gpu<minor>/gi<GI>/access and
	// gpu<minor>/gi<GI>/ci<CI>/access).
	GIID, CIID int
	// Profile is the instance's profile name as NVML reports it, e.g.
	// "1g.10gb" (the product's name less its prefix).
	Profile string
	// MemoryBytes is the instance's memory (NVML's memory info total on
	// the MIG device handle).
	MemoryBytes uint64
	// Multiprocessors is the instance's SM count.
	Multiprocessors int
}

// Name is the instance's device name in the slice: stable while the
// layout stays the same, and distinct from every whole GPU's name.
func (m MIGDevice) Name() string {
	return fmt.Sprintf("gpu-%d-mig-%d-%d", m.Parent.Index, m.GIID, m.CIID)
}

// MIGByName finds an instance of this inventory by its device name.
func (inv *Inventory) MIGByName(name string) (MIGDevice, bool) {
	for _, m := range inv.MIGDevices {
		if m.Name() == name {
			return m, true
		}
	}
	return MIGDevice{}, false
}

// MIGLayoutChange is what differs between two readings of a node's MIG
// instances: names of instances that appeared and that disappeared, in the
// order of the readings.
type MIGLayoutChange struct {
	Added, Removed []string
}

// Empty tells whether the layout stayed the same.
func (c MIGLayoutChange) Empty() bool { return len(c.Added) == 0 && len(c.Removed) == 0 }

// CompareMIGLayouts tells how after differs from before. An instance that
// kept its name but changed UUID (deleted and recreated with the same ids)
// is both removed and added: a claim prepared on the old one lost it.
func CompareMIGLayouts(before, after []MIGDevice) MIGLayoutChange {
	var c MIGLayoutChange
	old := map[string]string{}
	for _, m := range before {
		old[m.Name()] = m.UUID
	}
	cur := map[string]string{}
	for _, m := range after {
		cur[m.Name()] = m.UUID
		if uuid, ok := old[m.Name()]; !ok || uuid != m.UUID {
			c.Added = append(c.Added, m.Name())
		}
	}
	for _, m := range before {
		if uuid, ok := cur[m.Name()]; !ok || uuid != m.UUID {
			c.Removed = append(c.Removed, m.Name())
		}
	}
	return c
}

// MIGRef is what a prepared share on a MIG instance records of it: enough
// to give a container the instance's capability devices again, and to
// tell whether the instance is still there.
type MIGRef struct {
	ParentUUID string `json:"parentUUID"`
	GIID       int    `json:"giID"`
	CIID       int    `json:"ciID"`
	Profile    string `json:"profile"`
}

// Ref is the record a share keeps of m.
func (m MIGDevice) Ref() *MIGRef {
	return &MIGRef{ParentUUID: m.Parent.UUID, GIID: m.GIID, CIID: m.CIID, Profile: m.Profile}
}

// AsGPU is m seen as the GPU a share runs on: the instance's UUID (what
// NVIDIA_VISIBLE_DEVICES and CUDA name it by) and memory, on the parent's
// device node (its minor) and model.
func (m MIGDevice) AsGPU() GPU {
	g := m.Parent
	g.UUID = m.UUID
	g.MemoryBytes = m.MemoryBytes
	g.ComputeModes = ""
	g.ServerReserveBytes = 0
	return g
}
