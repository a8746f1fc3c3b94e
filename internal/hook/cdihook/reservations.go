// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	nvml "github.com/gpufrac/gpufrac/internal/hook/purenvml"
)

// Leaked reservations. With the dmem backend, setting a container's soft
// limit raises the reservation (dmem.min) of every ancestor cgroup by the
// same amount, and only a reset through NVML while the container's cgroup
// exists takes it back; a cgroup removed with its soft limit set leaves
// its share reserved in every ancestor (NVIDIA, mpsv3-memory-partitioning).
// No runtime offers a hook point that runs while the cgroup exists for
// every way a container ends (docs/design/nvidia/memory-limits.md), so gpufrac
// takes the second of the three deployment models NVIDIA's page lists:
// force the root reservation to 0 after every set-limits call. The root is
// the highest cgroup the propagation reaches (ReservationRoot); it is
// forced through NVML with soft 0 and its own hard limit kept, never by
// writing dmem files. What that costs (NVIDIA's words: the manual checks
// replace the event system, and the soft guarantee rests on MPS eviction)
// is in docs/enforcement.md.

// ReservationRoot is the cgroup whose reservation the hook forces to 0
// after every set: the highest ancestor of the container's cgroup below
// the hierarchy's mount point (kubepods.slice under the kubelet's systemd
// driver, kubepods under cgroupfs, or the top of the kubelet's
// --cgroup-root). The mount point's own cgroup has no dmem.min, so a
// leaf's soft limit raises every reservation up to and including this one
// and none above it. ok is false for a cgroup directly below the mount,
// which has no ancestor holding a reservation.
func ReservationRoot(cg Cgroup) (root string, ok bool) {
	mount := filepath.Clean(cg.Root)
	for a := filepath.Dir(filepath.Clean(cg.Path)); strings.HasPrefix(a, mount+"/"); a = filepath.Dir(a) {
		root, ok = a, true
	}
	return root, ok
}

// ResetRoot forces the reservation of root to 0 on every GPU of limits
// through NVML: soft 0, and the hard limit root already has (none, NVML's
// maximum, when it has no limit of its own). A GPU whose root NVML reports
// as having no per-cgroup limits (NOT_SUPPORTED: no dmem files there, as
// on the misc backend's flat accounting) has nothing to reset there.
func ResetRoot(lib nvml.Interface, root string, limits []Limit) error {
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
		hard := uint64(nvml.DEVICE_MEMORY_LIMIT_MAX)
		cur, ret := dev.GetMemoryLimits_v1(root)
		switch ret {
		case nvml.SUCCESS:
			// An administrator's hard limit on the root stays.
			hard = cur.HardLimit
		case nvml.ERROR_NOT_FOUND:
			// No limit of its own: it keeps none.
		case nvml.ERROR_NOT_SUPPORTED:
			continue
		default:
			errs = append(errs, fmt.Errorf("GPU %s: reading the limits of %s: %s", l.UUID, root, explain(ret)))
			continue
		}
		if ret := dev.SetMemoryLimits_v1(root, 0, hard); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %s: forcing the reservation of %s to 0: %s", l.UUID, root, explain(ret)))
		}
	}
	return errors.Join(errs...)
}
