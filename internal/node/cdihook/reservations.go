// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	nvml "github.com/gpufrac/gpufrac/internal/node/purenvml"
)

// Leaked reservations. With the dmem backend, setting a container's soft
// limit raises the reservation (dmem.min) of every ancestor cgroup by the
// same amount, and only a reset through NVML while the container's cgroup
// exists takes it back; a cgroup removed with its soft limit set leaves
// its share reserved in every ancestor (NVIDIA, mpsv3-memory-partitioning).
// No runtime offers a hook point that runs while the cgroup exists for
// every way a container ends (docs/design/nvidia-contract.md: containerd 2.4 sends
// NRI StopContainer after the task and its cgroup are deleted, CRI-O after
// the container stopped, and systemd removes a scope once it is empty), so
// gpufrac takes NVIDIA's documented alternative: after every set, it
// forces each ancestor's reservation back to what the live containers
// hold, through NVML (never by writing dmem files).

// Live is the sum of the soft limits of live gpufrac containers, per GPU
// UUID and ancestor cgroup path.
type Live map[string]map[string]uint64

// LiveReservations reads the hook's records under recordDir and sums the
// soft limits of every recorded container whose cgroup still exists into
// each of its ancestors strictly below root.
func LiveReservations(recordDir, root string) (Live, error) {
	files, err := filepath.Glob(filepath.Join(recordDir, "*", "*.json"))
	if err != nil {
		return nil, err
	}
	live := Live{}
	seen := map[string]bool{}
	for _, f := range files {
		r, err := ReadRecord(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // the plugin removed it meanwhile
		}
		if errors.Is(err, ErrBadRecord) {
			continue // not a record a hook wrote: it holds nothing
		}
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(r.Cgroup); err != nil || !fi.IsDir() || !countsAsRecord(f, r, root, seen) {
			continue
		}
		for _, l := range r.Limits {
			for _, a := range ancestors(r.Cgroup, root) {
				if live[l.UUID] == nil {
					live[l.UUID] = map[string]uint64{}
				}
				// Saturating: records hold what NVML accepted (at most
				// the GPU's memory), but a sum must not wrap whatever
				// the files say.
				sum := live[l.UUID][a] + l.Soft
				if sum < l.Soft {
					sum = math.MaxUint64
				}
				live[l.UUID][a] = sum
			}
		}
	}
	return live, nil
}

// ancestors lists path's ancestors strictly below root, nearest first.
func ancestors(path, root string) []string {
	root = filepath.Clean(root)
	var out []string
	for a := filepath.Dir(filepath.Clean(path)); strings.HasPrefix(a, root+"/"); a = filepath.Dir(a) {
		out = append(out, a)
	}
	return out
}

// Rebalance sets, for each GPU of limits, the soft limit of each ancestor
// of cg (nearest first, so the highest ends exact) to what live holds
// there, keeping the ancestor's own hard limit. The walk stops at the first
// ancestor NVML reports as having no per-cgroup limits (NOT_SUPPORTED: no
// dmem files there, or the flat misc backend, where limits do not nest),
// as the driver's own propagation stops there.
func Rebalance(lib nvml.Interface, cg Cgroup, limits []Limit, live Live) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	var errs []error
	for _, l := range limits {
		dev, ret := lib.DeviceGetHandleByUUID(l.UUID)
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %s: %w", l.UUID, ret))
			continue
		}
		for _, a := range ancestors(cg.Path, cg.Root) {
			hard := uint64(nvml.DEVICE_MEMORY_LIMIT_MAX)
			cur, ret := dev.GetMemoryLimits_v1(a)
			switch ret {
			case nvml.SUCCESS:
				hard = cur.HardLimit
			case nvml.ERROR_NOT_FOUND:
				// No limit of its own: it keeps none.
			default:
				ret = nvml.ERROR_NOT_SUPPORTED
			}
			if ret == nvml.ERROR_NOT_SUPPORTED {
				break
			}
			// An ancestor's own hard limit stays, and bounds its soft one.
			want := min(live[l.UUID][a], hard)
			if ret == nvml.SUCCESS && cur.SoftLimit == want {
				continue
			}
			if ret := dev.SetMemoryLimits_v1(a, want, hard); ret != nvml.SUCCESS {
				errs = append(errs, fmt.Errorf("GPU %s: resetting the reservation of %s to %d bytes: %s", l.UUID, a, want, explain(ret)))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// lockRecords serialises hooks that record and rebalance, so no hook sets
// an ancestor from a set of live containers another hook is changing. The
// lock file sits beside the record directory, which the plugin prunes.
func lockRecords(recordDir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(recordDir), 0o750); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Clean(recordDir)+".lock", os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
