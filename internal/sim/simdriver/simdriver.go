// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package simdriver is a simulated node's NVIDIA driver as the hook sees
// it: the file the plugin installs in place of libnvidia-ml.so.1, and the
// NVML (internal/hook/purenvml's Interface) that gpufrac-cdi-hook gets
// from it. It links no cgo, as the hook it is part of (the hook runs on
// the host, built with CGO_ENABLED=0); internal/sim/gpusim keeps the
// simulated NVML server the plugin uses and re-exports these names.
package simdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	nvml "github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Driver is a simulated node's NVIDIA driver as installed on disk. The
// plugin of a simulated node writes it, in place of libnvidia-ml.so.1,
// under the node's driver root; gpufrac-cdi-hook finds it there by the
// same lookup that finds the real library (cdihook.FindNVML) and loads it
// with Open. A node whose driver root holds no such file has no NVML
// for the hook, as a GPU Operator node seen from the host's library path.
type Driver struct {
	// Marker tells a simulated driver from a real library file.
	Marker        string `json:"gpufracSimulatedDriver"`
	DriverVersion string `json:"driverVersion"`
	// CgroupV2 is the simulated node's cgroup hierarchy; NVIDIA's
	// per-cgroup limits need v2.
	CgroupV2 bool `json:"cgroupV2"`
	// DmemUndelegated are cgroups, by their path below the hierarchy's
	// mount (e.g. "kubepods" or "kubepods/burstable"), whose
	// cgroup.subtree_control does not enable dmem: their descendants have
	// no dmem files, and NVML refuses limits there. Empty (the default):
	// delegated all the way down.
	DmemUndelegated []string    `json:"dmemUndelegated,omitempty"`
	GPUs            []DriverGPU `json:"gpus"`
}

// hasDmemFiles tells whether cgroup has dmem files: none of its strict
// ancestors is one of d's undelegated cgroups. The simulated driver knows
// no mount point, so an entry matches an ancestor's path by its last
// components.
func (d Driver) hasDmemFiles(cgroup string) bool {
	for a := filepath.Dir(filepath.Clean(cgroup)); a != filepath.Dir(a); a = filepath.Dir(a) {
		for _, u := range d.DmemUndelegated {
			if u = strings.Trim(filepath.Clean(u), "/"); u != "" && u != "." && (a == "/"+u || strings.HasSuffix(a, "/"+u)) {
				return false
			}
		}
	}
	return true
}

// DriverGPU is one GPU the simulated driver knows.
type DriverGPU struct {
	UUID        string `json:"uuid"`
	MemoryBytes uint64 `json:"memoryBytes"`
}

// Marker is the value of Driver.Marker in every simulated driver.
const Marker = "v1"

// SetMemoryLimitsSymbol is NVML's per-cgroup limit entry point, present
// from driver r615 (CUDA 13.4) on.
const SetMemoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// HasSetMemoryLimits tells whether the driver exports the symbol.
func (d Driver) HasSetMemoryLimits() bool {
	major, err := domain.DriverMajor(d.DriverVersion)
	return err == nil && major >= 615
}

// Install writes d as libnvidia-ml.so.1 into libDir (relative to
// driverRoot, e.g. usr/lib64 as in the GPU Operator's driver container)
// and returns its path.
func Install(driverRoot, libDir string, d Driver) (string, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(driverRoot, libDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("installing the simulated driver: %w", err)
	}
	path := filepath.Join(dir, "libnvidia-ml.so.1")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return "", fmt.Errorf("installing the simulated driver: %w", err)
	}
	return path, os.Rename(tmp, path)
}

// Open loads the simulated driver at libPath, found under the
// node's driver root. Its NVML answers as the real one does for the calls
// the hook makes: no nvmlDeviceSetMemoryLimits_v1 before r615, unknown
// GPUs not found, a limit above the GPU's memory or a soft limit above the
// hard one INVALID_ARGUMENT, a cgroup that does not exist (any more)
// OPERATING_SYSTEM, a cgroup v1 node NOT_SUPPORTED, a cgroup without dmem
// files (Driver.DmemUndelegated) NOT_FOUND. Only a call that
// succeeds on the real driver is recorded, to recordPath, with the
// ancestors' reservations it raises (see Reservations).
func Open(libPath, recordPath string) (nvml.Interface, error) {
	raw, err := os.ReadFile(libPath)
	if err != nil {
		return nil, err
	}
	var d Driver
	if err := json.Unmarshal(raw, &d); err != nil || d.Marker != Marker {
		return nil, fmt.Errorf("%s is not a simulated NVIDIA driver (a simulated node's hook cannot load a real library)", libPath)
	}
	return newDriverNVML(d, recordPath), nil
}

// driverNVML is a simulated driver's NVML.
type driverNVML struct {
	d          Driver
	recordPath string
	hasSymbol  bool
	gpus       map[string]uint64
}

// SimulatesCgroupV2 implements cdihook.SimulatedCgroupV2.
func (l *driverNVML) SimulatesCgroupV2() bool { return l.d.CgroupV2 }

func newDriverNVML(d Driver, recordPath string) *driverNVML {
	gpus := map[string]uint64{}
	for _, g := range d.GPUs {
		gpus[g.UUID] = g.MemoryBytes
	}
	return &driverNVML{d: d, recordPath: recordPath, hasSymbol: d.HasSetMemoryLimits(), gpus: gpus}
}

// Init implements nvml.Interface.
func (l *driverNVML) Init() nvml.Return { return nvml.SUCCESS }

// Shutdown implements nvml.Interface.
func (l *driverNVML) Shutdown() nvml.Return { return nvml.SUCCESS }

// ErrorString implements nvml.Interface.
func (l *driverNVML) ErrorString(r nvml.Return) string { return r.Error() }

// Extensions implements nvml.Interface.
func (l *driverNVML) Extensions() nvml.ExtendedInterface { return l }

// LookupSymbol answers as dlsym in a driver of the simulated version.
func (l *driverNVML) LookupSymbol(symbol string) error {
	if symbol == SetMemoryLimitsSymbol && !l.hasSymbol {
		return fmt.Errorf("undefined symbol: %s (simulated driver %s)", symbol, l.d.DriverVersion)
	}
	return nil
}

// DeviceGetHandleByUUID implements nvml.Interface.
func (l *driverNVML) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	total, ok := l.gpus[uuid]
	if !ok {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return driverDevice{l: l, uuid: uuid, total: total}, nvml.SUCCESS
}

// driverDevice is one GPU of a simulated driver.
type driverDevice struct {
	l     *driverNVML
	uuid  string
	total uint64
}

// GetMemoryLimits_v1 implements nvml.Device.
func (g driverDevice) GetMemoryLimits_v1(cgroup string) (nvml.MemoryLimits_v1, nvml.Return) {
	if g.l.d.CgroupV2 && !g.l.d.hasDmemFiles(cgroup) {
		// nvidia-smi's "Not Supported" for a cgroup without dmem files.
		return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
	}
	return getMemoryLimits(g.l.recordPath, g.uuid, cgroup, g.l.hasSymbol, g.l.d.CgroupV2)
}

// SetMemoryLimits_v1 implements nvml.Device: only a call the real driver
// accepts is recorded.
func (g driverDevice) SetMemoryLimits_v1(cgroup string, soft, hard uint64) nvml.Return {
	if !g.l.hasSymbol {
		// The loader's answer when the library lacks the symbol.
		return nvml.ERROR_FUNCTION_NOT_FOUND
	}
	if ret := checkSetMemoryLimits(cgroup, soft, hard, g.total, g.l.d.CgroupV2); ret != nvml.SUCCESS {
		return ret
	}
	if !g.l.d.hasDmemFiles(cgroup) {
		// Limits only on a cgroup with dmem files, else "not found"
		// (NVIDIA, mpsv3-memory-partitioning).
		return nvml.ERROR_NOT_FOUND
	}
	if err := appendRecord(g.l.recordPath, LimitRecord{UUID: g.uuid, Cgroup: cgroup, Soft: soft, Hard: hard}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}

// checkSetMemoryLimits is what NVML documents for
// nvmlDeviceSetMemoryLimits_v1 (docs/design/nvidia/memory-limits.md): INVALID_ARGUMENT
// for soft > hard or a limit above the device's memory (hard may be
// DEVICE_MEMORY_LIMIT_MAX, no limit), OPERATING_SYSTEM when the cgroup path
// cannot be opened, NOT_SUPPORTED where there are no per-cgroup limits.
func checkSetMemoryLimits(cgroup string, soft, hard, total uint64, cgroupV2 bool) nvml.Return {
	if soft > hard || soft > total || (hard > total && hard != nvml.DEVICE_MEMORY_LIMIT_MAX) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	fi, err := os.Stat(cgroup)
	if err != nil || !fi.IsDir() || !filepath.IsAbs(cgroup) {
		return nvml.ERROR_OPERATING_SYSTEM
	}
	if !cgroupV2 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

// getMemoryLimits answers nvmlDeviceGetMemoryLimits_v1 from the accepted
// calls: a cgroup whose limits were set reads back its reservation and
// hard limit; one that exists but was never set is NOT_FOUND (as a real
// r615 node answers, docs/design/nvidia/memory-limits.md); a cgroup v1 node has no
// per-cgroup limits at all.
func getMemoryLimits(recordPath, uuid, cgroup string, hasSymbol, cgroupV2 bool) (nvml.MemoryLimits_v1, nvml.Return) {
	if !hasSymbol {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	if !cgroupV2 {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
	}
	if fi, err := os.Stat(cgroup); err != nil || !fi.IsDir() {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_OPERATING_SYSTEM
	}
	records, err := ReadRecords(recordPath)
	if err != nil {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_UNKNOWN
	}
	reserved, hard := replay(records, "/")
	h, set := hard[uuid][cgroup]
	if !set {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
	}
	return nvml.MemoryLimits_v1{NameSpace: cgroup, SoftLimit: reserved[uuid][cgroup], HardLimit: h}, nvml.SUCCESS
}

// ReadRecords reads the calls a simulated node's NVML recorded, in order.
func ReadRecords(path string) ([]LimitRecord, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []LimitRecord
	for _, line := range splitLines(raw) {
		var r LimitRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func splitLines(raw []byte) [][]byte {
	var out [][]byte
	start := 0
	for i, b := range raw {
		if b == '\n' {
			if i > start {
				out = append(out, raw[start:i])
			}
			start = i + 1
		}
	}
	if start < len(raw) {
		out = append(out, raw[start:])
	}
	return out
}

// Reservations replays recorded limit calls as the dmem backend applies
// them (NVIDIA, mpsv3-memory-partitioning, "Ancestor reservation
// propagation"): setting a cgroup's soft limit sets its own reservation
// and raises every ancestor's, up to but not including root (the
// hierarchy's mount point), by the change. Deleting a cgroup changes no
// ancestor: what it contributed stays reserved, which is the leak NVIDIA
// warns of. The result maps GPU UUID to cgroup path to reserved bytes.
// That setting an ancestor directly moves its reservation to the value
// set, with the same propagation above it, is inferred.
func Reservations(records []LimitRecord, root string) map[string]map[string]uint64 {
	reserved, _ := replay(records, root)
	return reserved
}

// replay returns the reservations and, for cgroups set directly, their
// hard limits.
func replay(records []LimitRecord, root string) (reserved, hard map[string]map[string]uint64) {
	root = filepath.Clean(root)
	out := map[string]map[string]uint64{}
	hard = map[string]map[string]uint64{}
	for _, r := range records {
		m := out[r.UUID]
		if m == nil {
			m = map[string]uint64{}
			out[r.UUID] = m
			hard[r.UUID] = map[string]uint64{}
		}
		hard[r.UUID][r.Cgroup] = r.Hard
		delta := int64(r.Soft) - int64(m[r.Cgroup])
		m[r.Cgroup] = r.Soft
		for a := filepath.Dir(r.Cgroup); len(a) > len(root) && a != filepath.Dir(a); a = filepath.Dir(a) {
			m[a] = uint64(int64(m[a]) + delta)
		}
	}
	return out, hard
}

// LimitRecord is one SetMemoryLimits_v1 call that a simulated node's NVML
// accepted (see OpenDriver).
type LimitRecord struct {
	UUID   string `json:"uuid"`
	Cgroup string `json:"cgroup"`
	Soft   uint64 `json:"soft"`
	Hard   uint64 `json:"hard"`
}

func appendRecord(path string, r LimitRecord) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("recording simulated memory limits: %w", err)
	}
	// One write per record: appends of a short line do not interleave.
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("recording simulated memory limits: %w", err)
	}
	return f.Close()
}
