// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nvmldiscovery

import (
	"context"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// migInstances reads the MIG instances configured on parent, a GPU whose
// MIG mode is on, the way NVIDIA's DRA driver and device plugin do
// (go-nvlib's MIG device walk: nvmlDeviceGetMigDeviceHandleByIndex up to
// nvmlDeviceGetMaxMigDeviceCount, the profile from the GPU and compute
// instance profiles). A MIG-enabled GPU with no instance offers nothing.
func migInstances(d device.Device, parent domain.GPU) ([]domain.MIGDevice, error) {
	migs, err := d.GetMigDevices()
	if err != nil {
		return nil, fmt.Errorf("listing the MIG instances of %s: %w", parent.UUID, err)
	}
	out := make([]domain.MIGDevice, 0, len(migs))
	for _, m := range migs {
		inst, err := describeMIG(m, parent)
		if err != nil {
			return nil, err
		}
		out = append(out, inst)
	}
	// NVML's handle order is not a promise; the slice lists instances in
	// id order so an unchanged layout publishes an unchanged slice.
	sort.Slice(out, func(i, j int) bool {
		if out[i].GIID != out[j].GIID {
			return out[i].GIID < out[j].GIID
		}
		return out[i].CIID < out[j].CIID
	})
	return out, nil
}

func describeMIG(m device.MigDevice, parent domain.GPU) (domain.MIGDevice, error) {
	inst := domain.MIGDevice{Parent: parent}
	var ret nvml.Return
	if inst.UUID, ret = m.GetUUID(); ret != nvml.SUCCESS {
		return inst, fmt.Errorf("reading the uuid of a MIG instance of %s: %w", parent.UUID, ret)
	}
	if inst.GIID, ret = m.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return inst, fmt.Errorf("reading the GPU instance id of %s: %w", inst.UUID, ret)
	}
	if inst.CIID, ret = m.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return inst, fmt.Errorf("reading the compute instance id of %s: %w", inst.UUID, ret)
	}
	mem, ret := m.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return inst, fmt.Errorf("reading the memory of %s: %w", inst.UUID, ret)
	}
	inst.MemoryBytes = mem.Total
	attrs, ret := m.GetAttributes()
	if ret != nvml.SUCCESS {
		return inst, fmt.Errorf("reading the attributes of %s: %w", inst.UUID, ret)
	}
	inst.Multiprocessors = int(attrs.MultiprocessorCount)
	profile, err := m.GetProfile()
	if err != nil {
		return inst, fmt.Errorf("reading the profile of %s: %w", inst.UUID, err)
	}
	inst.Profile = profile.String()
	return inst, nil
}

// Layout is how the node's GPUs are split now: the GPUs whose MIG mode is
// off (fraction GPUs), the instances of those whose MIG mode is on, and
// the MIG-enabled GPUs without an instance (which offer nothing).
type Layout struct {
	GPUs       []domain.GPU
	MIGDevices []domain.MIGDevice
	Skipped    []domain.SkippedGPU
}

// ReadLayout reads the node's GPUs and MIG instances as Discover does,
// for a plugin that watches the layout while it runs: a GPU whose MIG mode
// was turned on or off since the last read moves between GPUs and
// MIGDevices (NVML may reset the GPU to change the mode, which may change
// its minor number, so it is described again). lib must not be
// initialised by the caller.
func ReadLayout(ctx context.Context, lib nvml.Interface, opts Options) (Layout, error) {
	end, err := session(ctx, lib, "reading the MIG layout")
	if err != nil {
		return Layout{}, err
	}
	defer end()
	return readLayout(lib, opts)
}

// readLayout walks the GPUs of an initialised lib.
func readLayout(lib nvml.Interface, opts Options) (Layout, error) {
	var out Layout
	devices, err := device.New(lib).GetDevices()
	if err != nil {
		return out, fmt.Errorf("listing GPUs: %w", err)
	}
	for i, d := range devices {
		gpu, err := describe(d, opts)
		if err != nil {
			return out, fmt.Errorf("describing GPU %d: %w", i, err)
		}
		// MIG splits the GPU in hardware: a fraction of a MIG-enabled GPU
		// would double-count its memory, so such a GPU offers its
		// configured instances, each whole, and no fractions.
		mig, err := d.IsMigEnabled()
		if err != nil {
			return out, fmt.Errorf("reading MIG mode of %s: %w", gpu.UUID, err)
		}
		if !mig {
			out.GPUs = append(out.GPUs, gpu)
			continue
		}
		instances, err := migInstances(d, gpu)
		if err != nil {
			return out, err
		}
		if len(instances) == 0 {
			reason := "MIG is enabled on this GPU and no MIG instance is configured: it offers neither fractions nor instances"
			out.Skipped = append(out.Skipped, domain.SkippedGPU{Index: gpu.Index, UUID: gpu.UUID, Reason: reason})
		}
		out.MIGDevices = append(out.MIGDevices, instances...)
	}
	return out, nil
}
