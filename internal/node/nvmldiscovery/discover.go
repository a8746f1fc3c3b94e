// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nvmldiscovery

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// setMemoryLimitsSymbol is the NVML entry point dmem enforcement needs; its
// presence in the loaded libnvidia-ml is the driver's capability statement.
const setMemoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// Options are the node facts discovery cannot get from NVML.
type Options struct {
	// CgroupRoot is where the cgroup hierarchy is mounted; default
	// /sys/fs/cgroup. dmem needs it to be cgroup v2.
	CgroupRoot string
	// LookPath finds nvidia-cuda-mps-control; default exec.LookPath.
	LookPath func(file string) (string, error)
	// CgroupV2, when set, replaces the check of CgroupRoot: a simulated
	// node declares its cgroup hierarchy with it, and detection then runs
	// as on a real node (the simulated driver's symbols included).
	CgroupV2 func() bool
	// DmemUndelegated, when set, replaces the walk of CgroupRoot's
	// cgroup.subtree_control files (DmemUndelegated): a simulated node
	// answers from its driver's delegation setting. It returns the first
	// cgroup down the kubelet's pod tree that does not enable dmem, ""
	// when all do.
	DmemUndelegated func() (string, error)
	// ForceEnforcement, when set, replaces detection. Unit tests use it
	// so a laptop without a GPU still exercises every enforcement path.
	ForceEnforcement domain.Enforcement
	// PCIeRoot resolves a PCI bus id to its PCIe root; nil skips the
	// attribute (simulated GPUs have no sysfs entry).
	PCIeRoot func(pciBusID string) (string, error)
}

// Discover enumerates the GPUs behind lib. lib must not be initialised by the
// caller; Discover initialises and shuts down its own NVML session.
func Discover(ctx context.Context, lib nvml.Interface, opts Options) (*domain.Inventory, error) {
	logger := klog.FromContext(ctx)
	end, err := session(ctx, lib, "discovery")
	if err != nil {
		return nil, err
	}
	defer end()

	inv := &domain.Inventory{}
	var ret nvml.Return
	if inv.DriverVersion, ret = lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("reading the driver version: %w", ret)
	}
	cuda, ret := lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("reading the CUDA driver version: %w", ret)
	}
	// NVML encodes CUDA 13.4 as 13040.
	inv.CUDADriverVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)

	layout, err := readLayout(lib, opts)
	if err != nil {
		return nil, err
	}
	inv.GPUs, inv.MIGDevices, inv.Skipped = layout.GPUs, layout.MIGDevices, layout.Skipped
	for _, s := range inv.Skipped {
		logger.Info("Skipping GPU", "index", s.Index, "uuid", s.UUID, "reason", s.Reason)
	}

	inv.MPSVersion = detectMPS(inv.DriverVersion, opts)
	if opts.ForceEnforcement != "" {
		inv.Enforcement = opts.ForceEnforcement
		logger.Info("Memory enforcement is simulated, not detected", "enforcement", inv.Enforcement)
	} else {
		inv.Enforcement, inv.EnforcementNote = detectEnforcement(lib, inv.MPSVersion, opts)
		if inv.EnforcementNote != "" {
			logger.Info("The driver sets per-cgroup limits, but this node cannot use them", "reason", inv.EnforcementNote, "enforcement", inv.Enforcement)
		}
	}
	logger.Info("Discovered GPUs", "count", len(inv.GPUs), "migInstances", len(inv.MIGDevices), "skipped", len(inv.Skipped),
		"driverVersion", inv.DriverVersion, "cudaDriverVersion", inv.CUDADriverVersion,
		"enforcement", inv.Enforcement, "mpsVersion", inv.MPSVersion)
	return inv, nil
}

func describe(d device.Device, opts Options) (domain.GPU, error) {
	var g domain.GPU
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("reading uuid: %w", ret)
	}
	if g.Index, ret = d.GetIndex(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("reading index of %s: %w", g.UUID, ret)
	}
	if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("reading minor number of %s: %w", g.UUID, ret)
	}
	if g.ProductName, ret = d.GetName(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("reading name of %s: %w", g.UUID, ret)
	}
	var err error
	if g.Architecture, err = d.GetArchitectureAsString(); err != nil {
		return g, fmt.Errorf("reading architecture of %s: %w", g.UUID, err)
	}
	if g.Brand, err = d.GetBrandAsString(); err != nil {
		return g, fmt.Errorf("reading brand of %s: %w", g.UUID, err)
	}
	if g.CUDAComputeCapability, err = d.GetCudaComputeCapabilityAsString(); err != nil {
		return g, fmt.Errorf("reading compute capability of %s: %w", g.UUID, err)
	}
	if g.PCIBusID, err = d.GetPCIBusID(); err != nil {
		return g, fmt.Errorf("reading PCI bus id of %s: %w", g.UUID, err)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("reading memory of %s: %w", g.UUID, ret)
	}
	g.MemoryBytes = mem.Total
	if opts.PCIeRoot != nil && g.PCIBusID != "" {
		// The attribute only helps topology-aware selection; a GPU whose
		// root cannot be resolved is still offered.
		if root, err := opts.PCIeRoot(g.PCIBusID); err == nil {
			g.PCIeRoot = root
		}
	}
	return g, nil
}

func detectMPS(driverVersion string, opts Options) string {
	lookPath := opts.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	if _, err := lookPath("nvidia-cuda-mps-control"); err != nil {
		return domain.MPSVersionNone
	}
	if major, err := domain.DriverMajor(driverVersion); err == nil && major >= domain.MPSV3MinDriverMajor {
		return domain.MPSVersionV3
	}
	return domain.MPSVersionLegacy
}

// detectEnforcement: per-cgroup limits need the driver's
// nvmlDeviceSetMemoryLimits_v1 (r615+), cgroup v2 (NVIDIA,
// mpsv3-memory-partitioning), and dmem delegated down the kubelet's pod
// tree; without them the node enforces at most what MPS's pinned memory
// limit gives SMSharing clients. note says why a driver that could set
// per-cgroup limits does not get dmem.
func detectEnforcement(lib nvml.Interface, mpsVersion string, opts Options) (enforcement domain.Enforcement, note string) {
	cgroupV2 := opts.CgroupV2
	if cgroupV2 == nil {
		cgroupV2 = func() bool { return isCgroupV2(opts.CgroupRoot) }
	}
	if hasSymbol(lib, setMemoryLimitsSymbol) && cgroupV2() {
		undelegated := opts.DmemUndelegated
		if undelegated == nil {
			undelegated = func() (string, error) { return DmemUndelegated(cgroupRootOrDefault(opts.CgroupRoot)) }
		}
		level, err := undelegated()
		switch {
		case err != nil:
			note = fmt.Sprintf("dmem delegation unreadable: %v", err)
		case level != "":
			note = DmemNotDelegatedNote(level)
		default:
			return domain.EnforcementDMem, ""
		}
	}
	if mpsVersion != domain.MPSVersionNone {
		return domain.EnforcementMPS, note
	}
	return domain.EnforcementNone, note
}

// DmemNotDelegatedNote says which cgroup does not delegate dmem.
func DmemNotDelegatedNote(level string) string {
	return fmt.Sprintf("dmem is not enabled in cgroup.subtree_control of %s", level)
}

func cgroupRootOrDefault(root string) string {
	if root == "" {
		return "/sys/fs/cgroup"
	}
	return root
}

func hasSymbol(lib nvml.Interface, symbol string) bool {
	ext, ok := lib.(nvml.ExtendedInterface)
	if !ok {
		ext = lib.Extensions()
	}
	return ext != nil && ext.LookupSymbol(symbol) == nil
}

// isCgroupV2 uses the unified hierarchy's root file rather than statfs so a
// test can point it at a plain directory.
func isCgroupV2(root string) bool {
	_, err := os.Stat(filepath.Join(cgroupRootOrDefault(root), "cgroup.controllers"))
	return err == nil
}

// session initialises lib for one read (what, for the log) and returns
// its end, which shuts lib down and logs a failure to.
func session(ctx context.Context, lib nvml.Interface, what string) (func(), error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML: %w", ret)
	}
	return func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			klog.FromContext(ctx).Error(ret, "Shutting down NVML after "+what)
		}
	}, nil
}
