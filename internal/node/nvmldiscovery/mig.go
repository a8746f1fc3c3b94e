// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nvmldiscovery

import (
	"context"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

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

// MIGLayout reads the MIG instances the node has now, as Discover does,
// for a plugin that watches the layout while it runs. lib must not be
// initialised by the caller.
func MIGLayout(ctx context.Context, lib nvml.Interface, opts Options) ([]domain.MIGDevice, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML: %w", ret)
	}
	defer func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			klog.FromContext(ctx).Error(ret, "Shutting down NVML after reading the MIG layout")
		}
	}()
	devices, err := device.New(lib).GetDevices()
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	var out []domain.MIGDevice
	for i, d := range devices {
		mig, err := d.IsMigEnabled()
		if err != nil {
			return nil, fmt.Errorf("reading MIG mode of GPU %d: %w", i, err)
		}
		if !mig {
			continue
		}
		parent, err := describe(d, opts)
		if err != nil {
			return nil, fmt.Errorf("describing GPU %d: %w", i, err)
		}
		instances, err := migInstances(d, parent)
		if err != nil {
			return nil, err
		}
		out = append(out, instances...)
	}
	return out, nil
}
