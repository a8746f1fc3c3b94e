// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cdispec renders a claim plan as a CDI spec, the file the container
// runtime reads to wire a container to its GPU share, and writes and removes
// those files through the CDI library (validated, atomic). The spec carries
// everything a container needs: device nodes, the NVIDIA environment
// contract, a /dev/shm of its own, the MPS wiring of its route and, only
// where the node enforces per-cgroup limits, the gpufrac-cdi-hook that
// applies the memory limits to the container's cgroup.
package cdispec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/filewrite"
)

// CDI vendor and class of every device gpufrac hands out.
const (
	Vendor = "k8s.gpufrac.dev"
	Class  = "fraction"
	Kind   = Vendor + "/" + Class
)

// Paths inside the container. The pipe directory is where MPS clients look
// by default, so CUDA programs that ignore CUDA_MPS_PIPE_DIRECTORY still
// find the server. No client gets the daemon's log directory (mounts.go).
const (
	ContainerMPSPipeDir = "/tmp/nvidia-mps"
	ContainerShmDir     = "/dev/shm"
)

// Control device nodes every CUDA container needs besides its GPUs.
var controlDeviceNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// GPUDeviceNode is the device node of the GPU with the given minor number.
func GPUDeviceNode(minor int) string { return "/dev/nvidia" + strconv.Itoa(minor) }

// Options are the node facts a spec depends on.
type Options struct {
	// HookPath is the host path of gpufrac-cdi-hook.
	HookPath string
	// HookArgs are appended to the hook's arguments (the simulator points
	// the hook at its recording NVML with them).
	HookArgs []string
	// DriverRoot is the host root of the NVIDIA driver installation the
	// hook loads NVML under ("/" for a host install, /run/nvidia/driver
	// with the GPU Operator's driver container); empty: the hook's default.
	DriverRoot string
	// RecordDir, when set, is where the hook records each container's
	// cgroup for per-fraction metrics.
	RecordDir string
	// DeviceNode fills in the type and numbers of a device node. Giving them
	// explicitly means the runtime need not stat the node when it injects.
	DeviceNode func(path string) (cdispec.DeviceNode, error)
	// Counter, when set, counts spec files written (and fsyncs: none).
	Counter *filewrite.Counter
	// Driver, when set, are the driver's files every claim's container
	// gets (internal/node/driverspec): its libraries and binaries from the
	// driver root and the hook that adds them to the linker cache, so the
	// spec needs no NVIDIA runtime.
	Driver *cdispec.ContainerEdits
	// MIGCaps resolves the capability device nodes of MIG instance gi/ci
	// on the GPU with parentMinor (HostMIGCaps on a real node); nil: the
	// node offers no MIG instances, and a plan with one fails.
	MIGCaps func(parentMinor, gi, ci int) ([]cdispec.DeviceNode, error)
	// ShmSizeBytes caps the tmpfs each fraction container gets on
	// /dev/shm (the plugin's --shm-size); 0 leaves the kernel's tmpfs
	// default, half of the node's memory.
	ShmSizeBytes int64
}

// SpecName is the transient spec file name of a claim: one file per claim,
// named after its UID so a recreated claim never reuses a cached spec.
func SpecName(claimUID types.UID) string {
	return cdi.GenerateTransientSpecName(Vendor, Class, string(claimUID)) + ".json"
}

// DeviceName names one share's CDI device. The claim UID and the share ID
// make it unique even for two shares of one GPU in one claim.
func DeviceName(claimUID types.UID, d plan.Device) string {
	share := "whole"
	if d.ShareID != nil {
		share = string(*d.ShareID)
	}
	return fmt.Sprintf("%s-%s-%s", claimUID, d.Device, share)
}

// DeviceID is the fully qualified CDI device ID the kubelet passes on.
func DeviceID(claimUID types.UID, d plan.Device) string {
	return Kind + "=" + DeviceName(claimUID, d)
}

// Build renders the spec of a claim plan.
func Build(c *plan.Claim, opts Options) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: Kind}
	claimEdits := cdispec.ContainerEdits{Env: env(c)}
	for _, path := range controlDeviceNodes {
		node, err := opts.DeviceNode(path)
		if err != nil {
			return nil, fmt.Errorf("resolving device node %s: %w", path, err)
		}
		claimEdits.DeviceNodes = append(claimEdits.DeviceNodes, &node)
	}
	claimEdits.Mounts = mounts(c, opts)
	if h := hook(c, opts); h != nil {
		claimEdits.Hooks = []*cdispec.Hook{h}
	}
	if d := opts.Driver; d != nil {
		claimEdits.Mounts = append(claimEdits.Mounts, d.Mounts...)
		claimEdits.DeviceNodes = append(claimEdits.DeviceNodes, d.DeviceNodes...)
		claimEdits.Hooks = append(claimEdits.Hooks, d.Hooks...)
	}
	spec.ContainerEdits = claimEdits

	for _, d := range c.Devices {
		nodes, err := deviceNodes(d, opts)
		if err != nil {
			return nil, err
		}
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           DeviceName(c.UID, d),
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes},
		})
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("finding the CDI version of the spec: %w", err)
	}
	spec.Version = version
	return spec, nil
}

// deviceNodes are the nodes of one share: its GPU's, and for a MIG
// instance (on its parent's node) the instance's two capability devices.
func deviceNodes(d plan.Device, opts Options) ([]*cdispec.DeviceNode, error) {
	node, err := opts.DeviceNode(GPUDeviceNode(d.GPU.Minor))
	if err != nil {
		return nil, fmt.Errorf("resolving the device node of GPU %s: %w", d.GPU.UUID, err)
	}
	out := []*cdispec.DeviceNode{&node}
	if d.MIG == nil {
		return out, nil
	}
	if opts.MIGCaps == nil {
		return nil, fmt.Errorf("MIG instance %s: this node resolves no MIG capability devices", d.GPU.UUID)
	}
	caps, err := opts.MIGCaps(d.GPU.Minor, d.MIG.GIID, d.MIG.CIID)
	if err != nil {
		return nil, fmt.Errorf("resolving the capability devices of MIG instance %s (GPU instance %d, compute instance %d on GPU minor %d): %w",
			d.GPU.UUID, d.MIG.GIID, d.MIG.CIID, d.GPU.Minor, err)
	}
	for i := range caps {
		out = append(out, &caps[i])
	}
	return out, nil
}

// MiB renders bytes in the unit of NVIDIA's memory environment contract,
// rounded down so a limit never grows by rounding.
func MiB(bytes int64) int64 { return bytes >> 20 }

// env is claim-wide: several CDI devices of one claim share one container,
// and per-device variables of the same name would overwrite each other.
// Lists follow the order of NVIDIA_VISIBLE_DEVICES.
func env(c *plan.Claim) []string {
	gpus := c.PerGPU()
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
	}
	out := []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}
	out = append(out, limitEnv(c)...)
	out = append(out, "GPUFRAC_CLAIM="+c.Namespace+"/"+c.Name)
	if mps := c.MPS(); mps != nil {
		var hard int64
		var atp *int32
		for _, d := range c.Devices {
			if d.MPS != nil {
				hard += d.HardLimitBytes
				if d.ActiveThreadPercentage != nil {
					atp = d.ActiveThreadPercentage
				}
			}
		}
		out = append(out, "CUDA_MPS_PIPE_DIRECTORY="+ContainerMPSPipeDir)
		// A client can only lower what the daemon set, never raise it. A
		// client of the node server gets none: its claim may span GPUs,
		// and gpufrac uses a list of per-device limits only once it has
		// read NVIDIA's form of it again (docs/design/nvidia/mps-multi-gpu.md,
		// issue 35 item 4); the node server runs only on dmem nodes, where
		// the container's cgroup holds each GPU to its own share's limit
		// (the hook's per-GPU limits, limitEnv), and an SMSharing claim's
		// namespace carries its largest per-GPU limit daemon-side.
		if len(mps.ServerGPUs) == 0 {
			out = append(out, fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s=%dM", mps.GPUUUID, MiB(hard)))
		}
		if atp != nil {
			out = append(out, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", *atp))
		}
	}
	return out
}

// Writer writes and removes claim specs in one CDI directory.
type Writer struct {
	dir   string
	cache *cdi.Cache
	opts  Options
}

// NewWriter writes into dir (created if missing).
func NewWriter(dir string, opts Options) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating CDI directory %s: %w", dir, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("opening CDI directory %s: %w", dir, err)
	}
	return &Writer{dir: dir, cache: cache, opts: opts}, nil
}

// Write renders and writes the spec of c, replacing any earlier one, and
// returns the CDI device IDs in the order of c.Devices.
//
// The write is atomic and not durable (write.go): a temp file in the spec
// directory, validated by the CDI library, renamed over the spec, with no
// fsync. That is what this file needs: a
// container runtime never reads a torn spec, and after a power loss every
// container that used it is gone and Recover removes specs the (void)
// checkpoint does not account for (docs/reliability.md).
func (w *Writer) Write(c *plan.Claim) ([]string, error) {
	spec, err := Build(c, w.opts)
	if err != nil {
		return nil, err
	}
	if err := w.writeSpec(spec, c.UID); err != nil {
		return nil, fmt.Errorf("writing CDI spec for claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	w.opts.Counter.AddWrite()
	return DeviceIDs(c), nil
}

// DeviceIDs are the CDI device IDs of c, in the order of c.Devices.
func DeviceIDs(c *plan.Claim) []string {
	ids := make([]string, len(c.Devices))
	for i, d := range c.Devices {
		ids[i] = DeviceID(c.UID, d)
	}
	return ids
}

// Exists tells whether the spec of a claim is on disk.
func (w *Writer) Exists(claimUID types.UID) (bool, error) {
	_, err := os.Stat(w.Path(claimUID))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Path is where the spec of a claim lives.
func (w *Writer) Path(claimUID types.UID) string { return filepath.Join(w.dir, SpecName(claimUID)) }

// Remove deletes the spec of a claim; a missing spec is not an error.
func (w *Writer) Remove(claimUID types.UID) error {
	if err := w.cache.RemoveSpec(SpecName(claimUID)); err != nil {
		return fmt.Errorf("removing CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// List returns the claim UIDs whose specs are in the directory, so that
// start-up can remove specs no checkpoint entry accounts for.
func (w *Writer) List() ([]types.UID, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("listing CDI directory %s: %w", w.dir, err)
	}
	prefix := strings.TrimSuffix(SpecName("X"), "X.json")
	var out []types.UID
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, ".json") {
			out = append(out, types.UID(strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".json")))
		}
	}
	return out, nil
}
