// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	nodecdi "github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
)

// maxMIGDevices is what nvmlDeviceGetMaxMigDeviceCount reports on the MIG
// GPUs the presets model (A100, H100, H200, B200: seven compute slices).
const maxMIGDevices = 7

// ciProfileForSlices is the compute instance profile that spans a GPU
// instance of n slices: gpusim configures one compute instance per GPU
// instance, as `nvidia-smi mig -cgi <profiles> -C` does.
var ciProfileForSlices = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// enableMIG turns MIG mode on for dev and configures one instance per
// profile, in order, as an operator's MIG manager would before the plugin
// starts.
func enableMIG(lib nvml.Interface, dev *server.Device, nodeName string, profiles []string) error {
	if err := SetMIGMode(dev, nodeName, true); err != nil {
		return err
	}
	for _, p := range profiles {
		if _, err := AddMIGInstance(lib, dev, p); err != nil {
			return err
		}
	}
	return nil
}

// SetMIGMode turns MIG mode on or off for dev, as nvmlDeviceSetMigMode
// (nvidia-smi -mig 1|0) does on a running node. NVML documents that it may
// reset the GPU to change the mode and answers NVML_ERROR_IN_USE when the
// device is not idle: the simulated GPU refuses while it has compute
// processes. Turned on, the GPU has no instance until AddMIGInstance
// creates one. Turning it off while GPU instances exist is refused too,
// stricter than the driver (whose reset would take them), so a test
// deletes them first as the GPU Operator's MIG manager does.
func SetMIGMode(dev *server.Device, nodeName string, on bool) error {
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("simulated GPU %d: reading its processes: %w", dev.Index, ret)
	}
	if len(procs) > 0 {
		return fmt.Errorf("simulated GPU %d: %d compute processes run on it: %w", dev.Index, len(procs), nvml.ERROR_IN_USE)
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if on {
		mode = nvml.DEVICE_MIG_ENABLE
	} else if n := len(gpuInstances(dev)); n > 0 {
		return fmt.Errorf("simulated GPU %d: %d GPU instances exist; delete them before turning MIG mode off: %w", dev.Index, n, nvml.ERROR_IN_USE)
	}
	if ret, _ := dev.SetMigMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("simulated GPU %d: setting MIG mode %d: %w", dev.Index, mode, ret)
	}
	if on {
		installMIGFuncs(dev, nodeName)
	}
	return nil
}

// AddMIGInstance creates a GPU instance of profile (e.g. "1g.10gb") with
// one compute instance spanning it on dev, whose MIG mode is on, and
// returns the GPU instance id. Like the real driver it refuses a profile
// the GPU does not have and an instance that does not fit beside the
// others (by compute slices).
func AddMIGInstance(lib nvml.Interface, dev *server.Device, profile string) (int, error) {
	if mode, _, _ := dev.GetMigMode(); mode != nvml.DEVICE_MIG_ENABLE {
		return 0, fmt.Errorf("simulated GPU %d: MIG mode is off", dev.Index)
	}
	giInfo, ciID, err := findProfile(lib, dev, profile)
	if err != nil {
		return 0, err
	}
	if used := usedSlices(dev); used+giInfo.SliceCount > maxSlices(dev) {
		return 0, fmt.Errorf("simulated GPU %d: a %s instance needs %d slices, %d of %d are in use: %w", dev.Index, profile, giInfo.SliceCount, used, maxSlices(dev), nvml.ERROR_INSUFFICIENT_RESOURCES)
	}
	gi, ret := dev.CreateGpuInstance(&giInfo)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("simulated GPU %d: creating a %s GPU instance: %w", dev.Index, profile, ret)
	}
	sgi := gi.(*server.GpuInstance)
	sgi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		sgi.RLock()
		defer sgi.RUnlock()
		for ci := range sgi.ComputeInstances {
			if int(ci.Info.Id) == id {
				return ci, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("simulated GPU %d: compute instance profile of %s: %w", dev.Index, profile, ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return 0, fmt.Errorf("simulated GPU %d: creating the compute instance of %s: %w", dev.Index, profile, ret)
	}
	return int(sgi.Info.Id), nil
}

// RemoveMIGInstance destroys GPU instance giID of dev with its compute
// instances, as `nvidia-smi mig -dci -gi <id>` then `-dgi -gi <id>` do.
func RemoveMIGInstance(dev *server.Device, giID int) error {
	for _, gi := range gpuInstances(dev) {
		if int(gi.Info.Id) != giID {
			continue
		}
		for _, ci := range computeInstances(gi) {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("simulated GPU %d: destroying compute instance %d of GPU instance %d: %w", dev.Index, ci.Info.Id, giID, ret)
			}
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("simulated GPU %d: destroying GPU instance %d: %w", dev.Index, giID, ret)
		}
		return nil
	}
	return fmt.Errorf("simulated GPU %d has no GPU instance %d: %w", dev.Index, giID, nvml.ERROR_NOT_FOUND)
}

// findProfile finds the GPU instance profile whose NVIDIA name (as
// go-nvlib derives it, the way discovery reads it back) is profile, and
// the compute instance profile that spans it.
func findProfile(lib nvml.Interface, dev *server.Device, profile string) (nvml.GpuInstanceProfileInfo, int, error) {
	devlib := device.New(lib)
	ids := make([]int, 0, len(dev.Config.MIGProfiles.GpuInstanceProfiles))
	for id := range dev.Config.MIGProfiles.GpuInstanceProfiles {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var known []string
	for _, id := range ids {
		info := dev.Config.MIGProfiles.GpuInstanceProfiles[id]
		ciID, ok := ciProfileForSlices[info.SliceCount]
		if !ok {
			continue
		}
		p, err := devlib.NewMigProfile(id, ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, dev.MemoryInfo.Total)
		if err != nil {
			continue
		}
		if p.String() == profile {
			return info, ciID, nil
		}
		known = append(known, p.String())
	}
	return nvml.GpuInstanceProfileInfo{}, 0, fmt.Errorf("simulated GPU %d (%s) has no MIG profile %q; it has %v: %w", dev.Index, dev.Config.Name, profile, known, nvml.ERROR_NOT_SUPPORTED)
}

func maxSlices(dev *server.Device) uint32 {
	var most uint32
	for _, info := range dev.Config.MIGProfiles.GpuInstanceProfiles {
		most = max(most, info.SliceCount)
	}
	return most
}

func usedSlices(dev *server.Device) uint32 {
	var used uint32
	for _, gi := range gpuInstances(dev) {
		used += dev.Config.MIGProfiles.GpuInstanceProfiles[int(gi.Info.ProfileId)].SliceCount
	}
	return used
}

// gpuInstances are dev's GPU instances in id order (the mock keeps a map).
func gpuInstances(dev *server.Device) []*server.GpuInstance {
	dev.RLock()
	defer dev.RUnlock()
	out := make([]*server.GpuInstance, 0, len(dev.GpuInstances))
	for gi := range dev.GpuInstances {
		out = append(out, gi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Info.Id < out[j].Info.Id })
	return out
}

func computeInstances(gi *server.GpuInstance) []*server.ComputeInstance {
	gi.RLock()
	defer gi.RUnlock()
	out := make([]*server.ComputeInstance, 0, len(gi.ComputeInstances))
	for ci := range gi.ComputeInstances {
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Info.Id < out[j].Info.Id })
	return out
}

// installMIGFuncs gives dev the MIG device handles go-nvml's mock server
// lacks, answered from its live GPU and compute instances, so discovery
// reads a simulated MIG GPU through the same calls as a real one.
func installMIGFuncs(dev *server.Device, nodeName string) {
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return maxMIGDevices, nvml.SUCCESS }
	dev.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		for _, gi := range gpuInstances(dev) {
			if int(gi.Info.Id) == id {
				return gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	dev.GetMigDeviceHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
		if index < 0 || index >= maxMIGDevices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		i := 0
		for _, gi := range gpuInstances(dev) {
			for _, ci := range computeInstances(gi) {
				if i == index {
					return migHandle(dev, nodeName, gi, ci), nvml.SUCCESS
				}
				i++
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

func migHandle(parent *server.Device, nodeName string, gi *server.GpuInstance, ci *server.ComputeInstance) nvml.Device {
	giProfile := parent.Config.MIGProfiles.GpuInstanceProfiles[int(gi.Info.ProfileId)]
	giID, ciID := int(gi.Info.Id), int(ci.Info.Id)
	uuid := catalog.MIGUUID(nodeName, parent.Index, giID, ciID)
	return &mock.Device{
		IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS },
		GetUUIDFunc:                            func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return giID, nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: giProfile.MemorySizeMB << 20}, nvml.SUCCESS
		},
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{
				MultiprocessorCount:       giProfile.MultiprocessorCount,
				MemorySizeMB:              giProfile.MemorySizeMB,
				GpuInstanceSliceCount:     giProfile.SliceCount,
				ComputeInstanceSliceCount: giProfile.SliceCount,
			}, nvml.SUCCESS
		},
	}
}

// nvidiaCapsMajor is the simulated major of "nvidia-caps" (dynamic on a
// real node; NVIDIA's DRA driver's mock NVML setup uses the same number).
const nvidiaCapsMajor = 236

// MIGMinors is the simulated node's /proc/driver/nvidia-caps/mig-minors
// for gpus GPUs: like the real file it lists every possible GPU and
// compute instance of every GPU, configured or not, numbered as the
// sample in NVIDIA's DRA driver shows (config 1, monitor 2, then per GPU
// 15 GPU instances of one access minor and 8 compute instance minors).
func MIGMinors(gpus int) []byte {
	var b []byte
	b = append(b, "config 1\nmonitor 2\n"...)
	for g := range gpus {
		for gi := range 15 {
			base := 3 + g*135 + gi*9
			b = fmt.Appendf(b, "gpu%d/gi%d/access %d\n", g, gi, base)
			for ci := range 8 {
				b = fmt.Appendf(b, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, base+1+ci)
			}
		}
	}
	return b
}

// MIGCaps resolves a simulated node's MIG capability devices the way
// cdispec.HostMIGCaps does on a real one, from MIGMinors.
func MIGCaps(gpus int) func(parentMinor, gi, ci int) ([]cdispec.DeviceNode, error) {
	minors := MIGMinors(gpus)
	return func(parentMinor, gi, ci int) ([]cdispec.DeviceNode, error) {
		paths, err := nodecdi.MIGCapPaths(minors, parentMinor, gi, ci)
		if err != nil {
			return nil, err
		}
		return nodecdi.CapNodes(paths, nvidiaCapsMajor)
	}
}
