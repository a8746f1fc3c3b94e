// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package gpusim builds simulated NVML servers from go-nvml's mock presets so
// the kubelet plugin, the demo and the tests run on machines without a GPU.
// The simulated GPUs behave like the real ones to the rest of the driver:
// same NVML interface, stable UUIDs per node, real PCI bus ids.
package gpusim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// presets maps the model names of pkg/domain's simulated catalog to
// go-nvml's presets; the SXM parts are what the DGX mocks (mock/dgx*) are
// built from. TestCatalogMatchesDiscovery holds the two equal.
var presets = map[string]gpus.Config{
	"h200":     gpus.H200_SXM5_141GB,
	"h100":     gpus.H100_SXM5_80GB,
	"a100":     gpus.A100_SXM4_80GB,
	"a100-40g": gpus.A100_SXM4_40GB,
	"b200":     gpus.B200_SXM5_180GB,
	"a30":      gpus.A30_PCIE_24GB,
}

// Simulated driver facts. A dmem node runs a driver branch with per-cgroup
// memory limits and MPS v3 (r615, CUDA 13.4); mps and none nodes run an
// older branch, with legacy MPS or without it, as such nodes do.
const (
	DriverVersion        = catalog.DriverVersion
	nvmlVersion          = "13.615.23.01"
	cudaDriverVersion    = 13040
	OldDriverVersion     = catalog.OldDriverVersion
	oldNVMLVersion       = "12.570.86.10"
	oldCUDADriverVersion = 12080
)

// Node is a simulated node: its NVML server, its driver as the hook finds
// it on disk, and the discovery options under which inventory detects the
// node's enforcement as on a real node.
type Node struct {
	NVML             *server.Server
	Driver           Driver
	InventoryOptions nvmldiscovery.Options
}

// NodeOptions say what kind of node to simulate.
type NodeOptions struct {
	// Enforcement picks the driver: dmem an r615 driver with per-cgroup
	// limits and MPS v3; mps an older driver with legacy MPS; none an
	// older driver without MPS.
	Enforcement domain.Enforcement
	// CgroupV1 simulates a node on cgroup v1, where even an r615 driver
	// sets no per-cgroup limits: it is detected as an mps node, and its
	// NVML refuses per-cgroup limits.
	CgroupV1 bool
	// DmemUndelegated is a cgroup below the hierarchy's mount (e.g.
	// "kubepods") whose cgroup.subtree_control lacks +dmem; empty: dmem
	// is delegated all the way down, as on a node set up for gpufrac.
	DmemUndelegated string
}

// NewNode simulates a node whose GPUs are spec and whose memory enforcement
// is enforcement, with the driver and MPS a real node of that kind has.
func NewNode(spec, nodeName string, enforcement domain.Enforcement) (*Node, error) {
	return NewNodeWith(spec, nodeName, NodeOptions{Enforcement: enforcement})
}

// NewNodeWith simulates the node opts describe. Nothing is forced: the
// plugin detects what the simulated driver and cgroups offer, as it does
// on a real node.
func NewNodeWith(spec, nodeName string, opts NodeOptions) (*Node, error) {
	enforcement := opts.Enforcement
	srv, err := New(spec, nodeName)
	if err != nil {
		return nil, err
	}
	mps := true
	switch enforcement {
	case domain.EnforcementDMem:
	case domain.EnforcementMPS:
		srv.DriverVersion, srv.NvmlVersion, srv.CudaDriverVersion = OldDriverVersion, oldNVMLVersion, oldCUDADriverVersion
	case domain.EnforcementNone:
		srv.DriverVersion, srv.NvmlVersion, srv.CudaDriverVersion = OldDriverVersion, oldNVMLVersion, oldCUDADriverVersion
		mps = false
	default:
		return nil, fmt.Errorf("simulated enforcement %q is not one of dmem, mps, none", enforcement)
	}
	driver := DriverFor(srv, !opts.CgroupV1)
	if opts.DmemUndelegated != "" {
		driver.DmemUndelegated = []string{opts.DmemUndelegated}
	}
	// Older drivers do not export the per-cgroup limit entry point.
	srv.LookupSymbolFunc = func(symbol string) error {
		if symbol == SetMemoryLimitsSymbol && !driver.HasSetMemoryLimits() {
			return fmt.Errorf("undefined symbol: %s (simulated driver %s)", symbol, driver.DriverVersion)
		}
		return nil
	}
	return &Node{
		NVML:   srv,
		Driver: driver,
		InventoryOptions: nvmldiscovery.Options{
			CgroupV2: func() bool { return !opts.CgroupV1 },
			// The plugin's walk of cgroup.subtree_control, answered
			// from the driver's setting (no v2 files on a v1 host).
			DmemUndelegated: func() (string, error) { return opts.DmemUndelegated, nil },
			LookPath: func(file string) (string, error) {
				if !mps {
					return "", fmt.Errorf("%s: not present on a simulated node without MPS", file)
				}
				return "/simulated/" + file, nil
			},
		},
	}, nil
}

// New builds an NVML server with the GPUs of spec. UUIDs derive from the
// node name and index so that a restarted plugin on the same node sees the
// same GPUs, as it would on real hardware, and two simulated nodes differ.
func New(spec, nodeName string) (*server.Server, error) {
	groups, err := catalog.ParseGPUs(spec)
	if err != nil {
		return nil, err
	}
	var configs []gpus.Config
	for _, g := range groups {
		configs = append(configs, gpus.Multiple(g.Count, presets[g.Model])...)
	}
	srv, err := server.New(
		server.WithGPUs(configs...),
		server.WithDriverVersion(DriverVersion),
		server.WithNVMLVersion(nvmlVersion),
		server.WithCUDADriverVersion(cudaDriverVersion),
	)
	if err != nil {
		return nil, fmt.Errorf("building simulated NVML server: %w", err)
	}
	for _, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.UUID = catalog.GPUUUID(nodeName, dev.Index)
		// The preset PCI info carries only the device id; real NVML also
		// reports the bus id, which the slice publishes.
		busID := dev.PciBusID
		pciDeviceID := dev.Config.PciDeviceId
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			info := nvml.PciInfo{PciDeviceId: pciDeviceID}
			for i := 0; i < len(busID) && i < len(info.BusId)-1; i++ {
				info.BusId[i] = int8(busID[i])
			}
			return info, nvml.SUCCESS
		}
		// The plugin's metrics ask every GPU for its processes; a
		// simulated GPU runs none and has no per-cgroup accounting (the
		// hook's records stand in for the limits), and must say so
		// rather than panic as the bare mock does.
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		dev.GetMemoryLimits_v1Func = func(string) (nvml.MemoryLimits_v1, nvml.Return) {
			return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
		}
	}
	// After the answers above: turning MIG on asks the GPU for its
	// processes, as NVML's mode change does.
	index := 0
	for _, g := range groups {
		for range g.Count {
			if len(g.MIG) > 0 {
				if err := enableMIG(srv, srv.Devices[index].(*server.Device), nodeName, g.MIG); err != nil {
					return nil, err
				}
			}
			index++
		}
	}
	return srv, nil
}

// NVIDIA's character device major, fixed by the driver; the UVM major is
// assigned at load time, so the simulator picks one from the range Linux
// hands out dynamically.
const (
	nvidiaMajor = 195
	uvmMajor    = 510
)

// DeviceNode describes the device nodes of simulated GPUs with the numbers
// a real node has, so CDI injection works on hosts without /dev/nvidia*.
func DeviceNode(path string) (cdispec.DeviceNode, error) {
	node := cdispec.DeviceNode{Path: path, Type: "c", Major: nvidiaMajor}
	switch path {
	case "/dev/nvidiactl":
		node.Minor = 255
	case "/dev/nvidia-uvm":
		node.Major = uvmMajor
	case "/dev/nvidia-uvm-tools":
		node.Major, node.Minor = uvmMajor, 1
	default:
		minor, err := strconv.Atoi(strings.TrimPrefix(path, "/dev/nvidia"))
		if err != nil || !strings.HasPrefix(path, "/dev/nvidia") {
			return cdispec.DeviceNode{}, fmt.Errorf("simulated node has no device %s", path)
		}
		node.Minor = int64(minor)
	}
	return node, nil
}
