// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cdihook is the logic of gpufrac-cdi-hook, the OCI createRuntime
// hook that gpufrac's CDI specs run: it finds the new container's cgroup
// from the OCI state on stdin and applies each GPU's soft (guaranteed) and
// hard (ceiling) memory limit to it through NVML, so the limits are exact
// per container and need no change to the workload. Any failure fails the
// container's creation with a message a user can act on; running a
// container without the limits it was promised would be worse.
package cdihook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	nvml "github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/hook/record"

	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
)

// Limit is one GPU's limits for the container, in bytes, as the hook's
// --gpu argument carries them (internal/hook/hookarg writes and parses it).
type Limit = hookarg.Limit

// ReadState decodes the OCI state the runtime passes on stdin, reading at
// most MaxStateBytes of it.
func ReadState(r io.Reader) (*oci.State, error) {
	var st oci.State
	if err := json.NewDecoder(&limitedReader{r: r, n: MaxStateBytes}).Decode(&st); err != nil {
		if errors.Is(err, ErrStateTooLarge) {
			return nil, ErrStateTooLarge
		}
		return nil, fmt.Errorf("reading the OCI container state from stdin: %w", err)
	}
	if st.Pid <= 0 {
		return nil, fmt.Errorf("OCI state of container %q has no pid; gpufrac-cdi-hook must run as a createRuntime hook", st.ID)
	}
	return &st, nil
}

// Cgroup is where a container's processes are accounted.
type Cgroup struct {
	// Path is the full sysfs path NVML expects.
	Path string
	// V2 is false on a cgroup v1 host, where NVML cannot set limits.
	V2 bool
	// Root is the mount point of its hierarchy: its ancestors below Root
	// are the cgroups whose reservations its soft limit raises.
	Root string
}

// FindCgroup reads /proc/<pid>/cgroup under procRoot and resolves the
// container's cgroup under cgroupRoot.
func FindCgroup(procRoot, cgroupRoot string, pid int) (Cgroup, error) {
	file := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	f, err := os.Open(file)
	if err != nil {
		return Cgroup{}, fmt.Errorf("cgroup of the container not found: %w", err)
	}
	defer func() { _ = f.Close() }()
	var v1Memory, v1First, v2, v1FirstRoot string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = filepath.Join(cgroupRoot, parts[2])
			continue
		}
		if v1First == "" {
			v1First = filepath.Join(cgroupRoot, parts[1], parts[2])
			v1FirstRoot = filepath.Join(cgroupRoot, parts[1])
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1Memory = filepath.Join(cgroupRoot, "memory", parts[2])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Cgroup{}, fmt.Errorf("reading %s: %w", file, err)
	}
	// A hybrid host (v1 controllers, plus an empty unified hierarchy
	// mounted elsewhere, usually cgroup-root/unified) lists a "0::" line
	// too; the container's cgroup that matters is then the v1 one, and the
	// unified path would wrongly resolve to cgroup-root itself.
	var cg Cgroup
	switch {
	case v1Memory != "":
		cg = Cgroup{Path: v1Memory, Root: filepath.Join(cgroupRoot, "memory")}
	case v1First != "":
		cg = Cgroup{Path: v1First, Root: v1FirstRoot}
	case v2 != "":
		cg = Cgroup{Path: v2, V2: true, Root: filepath.Clean(cgroupRoot)}
	default:
		return Cgroup{}, fmt.Errorf("cgroup of the container not found: %s lists no cgroup", file)
	}
	// On v1 the hierarchy's mount must itself be below the cgroup root, and
	// the container's cgroup below that mount: its root cgroup binds every
	// process of the hierarchy.
	if !cg.V2 {
		if err := checkCgroupPath(cgroupRoot, cg.Root, file); err != nil {
			return Cgroup{}, err
		}
	}
	return cg, checkCgroupPath(cg.Root, cg.Path, file)
}

// setMemoryLimitsSymbol must be exported by libnvidia-ml for limits to work.
const setMemoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// Apply sets every limit on cgroup through lib: the same calls on a real
// node and a simulated one, whose NVML refuses what the real one refuses.
func Apply(lib nvml.Interface, cg Cgroup, limits []Limit) error {
	_, err := apply(lib, cg, limits)
	return err
}

// apply is Apply, and also returns the limits NVML accepted: each raised
// the reservations of the cgroup's ancestors.
func apply(lib nvml.Interface, cg Cgroup, limits []Limit) ([]Limit, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML is not available (is the NVIDIA driver installed on this node?): %w: %s", ret, lib.ErrorString(ret))
	}
	defer func() { _ = lib.Shutdown() }()
	if ext := lib.Extensions(); ext != nil {
		if err := ext.LookupSymbol(setMemoryLimitsSymbol); err != nil {
			return nil, fmt.Errorf("this NVIDIA driver cannot set per-container GPU memory limits (needs r615 / CUDA 13.4 or later; %s missing)", setMemoryLimitsSymbol)
		}
	}
	var errs []error
	var accepted []Limit
	for _, l := range limits {
		dev, ret := lib.DeviceGetHandleByUUID(l.UUID)
		if ret == nvml.ERROR_FUNCTION_NOT_FOUND {
			errs = append(errs, fmt.Errorf("GPU %s: %s", l.UUID, explain(ret)))
			continue
		}
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %s is not on this node: %w", l.UUID, ret))
			continue
		}
		if ret := dev.SetMemoryLimits_v1(cg.Path, l.Soft, l.Hard); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("setting GPU %s memory limits (soft %d, hard %d bytes) on cgroup %s: %s", l.UUID, l.Soft, l.Hard, cg.Path, explain(ret)))
			continue
		}
		accepted = append(accepted, l)
	}
	return accepted, errors.Join(errs...)
}

// Options are the hook's inputs besides the OCI state.
type Options struct {
	Limits     []Limit
	ProcRoot   string
	CgroupRoot string
	// DriverRoot is the host root of the NVIDIA driver installation; NVML
	// is loaded from under it (FindNVML), never from the host's library
	// path, so a GPU Operator node (/run/nvidia/driver) works.
	DriverRoot string
	// Open loads the NVML library found under DriverRoot: on a real node
	// internal/hook/purenvml with that path (dlopen, no cgo), on a simulated node the simulated driver
	// installed at that path (internal/sim/gpusim), through the same lookup.
	Open func(libraryPath string) (nvml.Interface, error)
	// ClaimUID and RecordDir, when set, make the hook record the container
	// (see Record) for the plugin's per-fraction metrics.
	ClaimUID  string
	RecordDir string
}

// Annotations on the OCI spec that name the container, first match wins:
// containerd's CRI plugin writes the io.kubernetes.cri.* keys (the real
// node of test/e2e showed it writes no others), CRI-O the
// io.kubernetes.pod.* and io.kubernetes.container.* ones.
var (
	annotationNamespace = []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"}
	annotationPod       = []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"}
	annotationContainer = []string{"io.kubernetes.cri.container-name", "io.kubernetes.container.name"}
)

func annotation(st *oci.State, keys []string) string {
	for _, k := range keys {
		if v := st.Annotations[k]; v != "" {
			return v
		}
	}
	return ""
}

func writeRecord(st *oci.State, cg Cgroup, opts Options) error {
	r := record.Record{ClaimUID: opts.ClaimUID, Namespace: annotation(st, annotationNamespace), Pod: annotation(st, annotationPod),
		Container: annotation(st, annotationContainer), Cgroup: cg.Path, Limits: opts.Limits}
	for _, l := range opts.Limits {
		r.GPUs = append(r.GPUs, l.UUID)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path, err := resolveRecordPath(opts.RecordDir, opts.ClaimUID, st.ID)
	if err != nil {
		return err
	}
	// The rename replaces whatever is at path, a link included, without
	// following it; the temporary file is never opened through a link.
	tmp := path + ".tmp"
	if err := writeFileNoFollow(tmp, raw); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SimulatedCgroupV2 is implemented by a simulated node's NVML: a node
// simulated as cgroup v2 on a host that runs cgroup v1 (where no real node
// could set limits) declares so, and the hook then sets the limits on the
// container's v1 cgroup directory, which the simulated NVML checks exists.
// A node simulated as cgroup v1 refuses as a real one does.
type SimulatedCgroupV2 interface {
	SimulatesCgroupV2() bool
}

// Run is the whole hook: state in, limits applied.
func Run(stdin io.Reader, opts Options) error {
	if len(opts.Limits) == 0 {
		return errors.New("no --gpu limits given: nothing to apply")
	}
	// One limit per GPU: NVML keeps the last of two, and the record would
	// count both into the ancestors' reservations.
	seen := map[string]bool{}
	for _, l := range opts.Limits {
		if seen[l.UUID] {
			return fmt.Errorf("--gpu %q given twice: one limit per GPU", l.UUID)
		}
		seen[l.UUID] = true
	}
	if err := ValidateClaimUID(opts.ClaimUID); err != nil {
		return err
	}
	if err := ValidateRecordDir(opts.RecordDir); err != nil {
		return err
	}
	st, err := ReadState(stdin)
	if err != nil {
		return err
	}
	if err := ValidateContainerID(st.ID); err != nil {
		return err
	}
	libPath, err := FindNVML(opts.DriverRoot)
	if err != nil {
		return fmt.Errorf("container %s: %w", st.ID, err)
	}
	lib, err := opts.Open(libPath)
	if err != nil {
		return fmt.Errorf("container %s: loading NVML from %s: %w", st.ID, libPath, err)
	}
	cg, err := FindCgroup(opts.ProcRoot, opts.CgroupRoot, st.Pid)
	if err != nil {
		return err
	}
	if !cg.V2 {
		sim, ok := lib.(SimulatedCgroupV2)
		if !ok || !sim.SimulatesCgroupV2() {
			return fmt.Errorf("container %s is in cgroup v1 (%s): NVIDIA per-container GPU memory limits need cgroup v2 mounted at /sys/fs/cgroup; run this node with the unified hierarchy, or restart gpufrac-kubelet-plugin so the node stops offering memoryEnforcement dmem", st.ID, cg.Path)
		}
	}
	accepted, applyErr := apply(lib, cg, opts.Limits)
	// NVIDIA's model: the root's reservation goes back to 0 after every
	// accepted set, also when another GPU's set then failed (the accepted
	// one raised it, and the failed container's cgroup will go without a
	// reset). Concurrent hooks need no lock: each ends with its reset. A
	// failed reset costs the container nothing of its own limits; it is
	// reported, and the next container's hook forces the root again.
	if root, ok := ReservationRoot(cg); ok && len(accepted) > 0 {
		if err := ResetRoot(lib, root, accepted); err != nil {
			fmt.Fprintf(os.Stderr, "gpufrac-cdi-hook: container %s: %v\n", st.ID, err)
		}
	}
	if applyErr != nil {
		return fmt.Errorf("container %s: %w", st.ID, applyErr)
	}
	if opts.RecordDir == "" || opts.ClaimUID == "" {
		return nil
	}
	// The record is for the plugin's metrics: not worth failing a
	// container that has its limits over.
	if err := writeRecord(st, cg, opts); err != nil {
		fmt.Fprintf(os.Stderr, "gpufrac-cdi-hook: recording container %s: %v\n", st.ID, err)
	}
	return nil
}
