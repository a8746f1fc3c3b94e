package inventory

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// Enforcement is what a node can enforce about a share's GPU memory.
type Enforcement string

const (
	// EnforcementDMem: per-cgroup soft and hard limits through NVML
	// (nvmlDeviceSetMemoryLimits_v1, driver r615+, cgroup v2).
	EnforcementDMem Enforcement = "dmem"
	// EnforcementMPS: only the MPS server's pinned device memory limit,
	// which binds SMSharing clients alone.
	EnforcementMPS Enforcement = "mps"
	// EnforcementNone: the node can enforce nothing; claims asking for a
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

// setMemoryLimitsSymbol is the NVML entry point dmem enforcement needs; its
// presence in the loaded libnvidia-ml is the driver's capability statement.
const setMemoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// mpsV3MinDriverMajor is the first driver branch with MPS v3 memory
// partitioning and per-cgroup limits (r615, CUDA 13.4).
const mpsV3MinDriverMajor = 615

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

// AssignComputeModes applies a --sm-sharing-gpus setting: "" leaves every
// GPU open to both modes; "all", "none" or a comma list of GPU indices
// reserve the listed GPUs for SMSharing and the others for TimeSlicing.
func (inv *Inventory) AssignComputeModes(setting string) error {
	setting = strings.TrimSpace(setting)
	sm := map[int]bool{}
	switch setting {
	case "":
		for i := range inv.GPUs {
			inv.GPUs[i].ComputeModes = ComputeModesAny
		}
		return nil
	case "all":
		for _, g := range inv.GPUs {
			sm[g.Index] = true
		}
	case "none":
	default:
		for _, f := range strings.Split(setting, ",") {
			idx, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("--sm-sharing-gpus %q: %q is not a GPU index (want all, none or a list such as 0,1)", setting, f)
			}
			found := false
			for _, g := range inv.GPUs {
				found = found || g.Index == idx
			}
			if !found {
				return fmt.Errorf("--sm-sharing-gpus %q: this node has no GPU %d", setting, idx)
			}
			sm[idx] = true
		}
	}
	for i := range inv.GPUs {
		inv.GPUs[i].ComputeModes = ComputeModesTimeSlicing
		if sm[inv.GPUs[i].Index] {
			inv.GPUs[i].ComputeModes = ComputeModesSMSharing
		}
	}
	return nil
}

// Inventory is everything discovery found on one node.
type Inventory struct {
	GPUs              []GPU
	DriverVersion     string // as NVML reports it, e.g. "615.23.01"
	CUDADriverVersion string // "13.4"
	Enforcement       Enforcement
	MPSVersion        string
	// Skipped lists GPUs left out, with the reason, for status reporting.
	Skipped []SkippedGPU
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
	// ForceEnforcement, when set, replaces detection. Unit tests use it
	// so a laptop without a GPU still exercises every enforcement path.
	ForceEnforcement Enforcement
	// PCIeRoot resolves a PCI bus id to its PCIe root; nil skips the
	// attribute (simulated GPUs have no sysfs entry).
	PCIeRoot func(pciBusID string) (string, error)
}

// Discover enumerates the GPUs behind lib. lib must not be initialised by the
// caller; Discover initialises and shuts down its own NVML session.
func Discover(ctx context.Context, lib nvml.Interface, opts Options) (*Inventory, error) {
	logger := klog.FromContext(ctx)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML: %w", ret)
	}
	defer func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			logger.Error(ret, "Shutting down NVML after discovery")
		}
	}()

	inv := &Inventory{}
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

	devlib := device.New(lib)
	devices, err := devlib.GetDevices()
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	for i, d := range devices {
		gpu, skipReason, err := describe(d, opts)
		if err != nil {
			return nil, fmt.Errorf("describing GPU %d: %w", i, err)
		}
		if skipReason != "" {
			logger.Info("Skipping GPU", "index", gpu.Index, "uuid", gpu.UUID, "reason", skipReason)
			inv.Skipped = append(inv.Skipped, SkippedGPU{Index: gpu.Index, UUID: gpu.UUID, Reason: skipReason})
			continue
		}
		inv.GPUs = append(inv.GPUs, gpu)
	}

	inv.MPSVersion = detectMPS(inv.DriverVersion, opts)
	if opts.ForceEnforcement != "" {
		inv.Enforcement = opts.ForceEnforcement
		logger.Info("Memory enforcement is simulated, not detected", "enforcement", inv.Enforcement)
	} else {
		inv.Enforcement = detectEnforcement(lib, inv.MPSVersion, opts)
	}
	logger.Info("Discovered GPUs", "count", len(inv.GPUs), "skipped", len(inv.Skipped),
		"driverVersion", inv.DriverVersion, "cudaDriverVersion", inv.CUDADriverVersion,
		"enforcement", inv.Enforcement, "mpsVersion", inv.MPSVersion)
	return inv, nil
}

func describe(d device.Device, opts Options) (GPU, string, error) {
	var g GPU
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return g, "", fmt.Errorf("reading uuid: %w", ret)
	}
	if g.Index, ret = d.GetIndex(); ret != nvml.SUCCESS {
		return g, "", fmt.Errorf("reading index of %s: %w", g.UUID, ret)
	}
	// MIG splits the GPU in hardware; a fraction of a MIG-enabled GPU would
	// double-count its memory, so such GPUs are not offered.
	mig, err := d.IsMigEnabled()
	if err != nil {
		return g, "", fmt.Errorf("reading MIG mode of %s: %w", g.UUID, err)
	}
	if mig {
		return g, "MIG is enabled on this GPU; gpufrac offers only whole GPUs without MIG", nil
	}
	if g.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		return g, "", fmt.Errorf("reading minor number of %s: %w", g.UUID, ret)
	}
	if g.ProductName, ret = d.GetName(); ret != nvml.SUCCESS {
		return g, "", fmt.Errorf("reading name of %s: %w", g.UUID, ret)
	}
	if g.Architecture, err = d.GetArchitectureAsString(); err != nil {
		return g, "", fmt.Errorf("reading architecture of %s: %w", g.UUID, err)
	}
	if g.Brand, err = d.GetBrandAsString(); err != nil {
		return g, "", fmt.Errorf("reading brand of %s: %w", g.UUID, err)
	}
	if g.CUDAComputeCapability, err = d.GetCudaComputeCapabilityAsString(); err != nil {
		return g, "", fmt.Errorf("reading compute capability of %s: %w", g.UUID, err)
	}
	if g.PCIBusID, err = d.GetPCIBusID(); err != nil {
		return g, "", fmt.Errorf("reading PCI bus id of %s: %w", g.UUID, err)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return g, "", fmt.Errorf("reading memory of %s: %w", g.UUID, ret)
	}
	g.MemoryBytes = mem.Total
	if opts.PCIeRoot != nil && g.PCIBusID != "" {
		// The attribute only helps topology-aware selection; a GPU whose
		// root cannot be resolved is still offered.
		if root, err := opts.PCIeRoot(g.PCIBusID); err == nil {
			g.PCIeRoot = root
		}
	}
	return g, "", nil
}

func detectMPS(driverVersion string, opts Options) string {
	lookPath := opts.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	if _, err := lookPath("nvidia-cuda-mps-control"); err != nil {
		return MPSVersionNone
	}
	if major, err := DriverMajor(driverVersion); err == nil && major >= mpsV3MinDriverMajor {
		return MPSVersionV3
	}
	return MPSVersionLegacy
}

// detectEnforcement: per-cgroup limits need the driver's
// nvmlDeviceSetMemoryLimits_v1 (r615+) and cgroup v2 (NVIDIA,
// mpsv3-memory-partitioning); without either the node enforces at most
// what MPS's pinned memory limit gives SMSharing clients.
func detectEnforcement(lib nvml.Interface, mpsVersion string, opts Options) Enforcement {
	cgroupV2 := opts.CgroupV2
	if cgroupV2 == nil {
		cgroupV2 = func() bool { return isCgroupV2(opts.CgroupRoot) }
	}
	if hasSymbol(lib, setMemoryLimitsSymbol) && cgroupV2() {
		return EnforcementDMem
	}
	if mpsVersion != MPSVersionNone {
		return EnforcementMPS
	}
	return EnforcementNone
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
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return err == nil
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
