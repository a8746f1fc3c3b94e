// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package incident

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
	"github.com/gpufrac/gpufrac/internal/hook/record"
)

// NVMLSource samples every recorded container's GPU memory from NVML's
// per-cgroup limits (nvmlDeviceGetMemoryLimits_v1: soft limit, hard limit
// and current use of the container's own cgroup, as gpufrac-cdi-hook set
// them), the same reading the plugin's metrics use. Only nodes that
// enforce per-cgroup limits (memoryEnforcement dmem) answer; elsewhere the
// call fails and nothing is sampled.
type NVMLSource struct {
	NVML nvml.Interface
	// RecordDir is where gpufrac-cdi-hook records containers, one
	// directory per claim UID (cleaned up by the metrics collector).
	RecordDir string
	// Prepared returns the prepared claims (the checkpoint's plans).
	Prepared func() []plan.Claim
}

// Samples reads one sample per recorded container and GPU of a prepared
// claim.
func (s NVMLSource) Samples(now time.Time) []Sample {
	if s.NVML == nil || s.RecordDir == "" {
		return nil
	}
	claims := map[string]plan.Claim{}
	for _, c := range s.Prepared() {
		claims[string(c.UID)] = c
	}
	var out []Sample
	files, _ := filepath.Glob(filepath.Join(s.RecordDir, "*", "*.json"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var r record.Record
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		claim, ok := claims[r.ClaimUID]
		if !ok {
			continue
		}
		for _, uuid := range r.GPUs {
			share, ok := shareOnGPU(claim, uuid)
			if !ok {
				continue
			}
			dev, ret := s.NVML.DeviceGetHandleByUUID(uuid)
			if ret != nvml.SUCCESS {
				continue
			}
			lim, ret := dev.GetMemoryLimits_v1(r.Cgroup)
			if ret != nvml.SUCCESS {
				continue
			}
			// What NVML holds for the cgroup is what binds the
			// container; the plan says what was meant.
			if lim.SoftLimit > 0 && lim.SoftLimit != nvml.DEVICE_MEMORY_LIMIT_MAX {
				share.SoftBytes = int64(lim.SoftLimit)
			}
			if lim.HardLimit > 0 && lim.HardLimit != nvml.DEVICE_MEMORY_LIMIT_MAX {
				share.HardBytes = int64(lim.HardLimit)
			}
			out = append(out, Sample{Container: Container{Namespace: r.Namespace, Pod: r.Pod, Container: r.Container},
				Share: share, UsedBytes: int64(lim.CurrentUsed), Time: now})
		}
	}
	return out
}

// shareOnGPU is the claim's share on one GPU; several shares of one claim
// on one GPU give its containers their sum (plan.Claim.PerGPU).
func shareOnGPU(c plan.Claim, uuid string) (Share, bool) {
	var out Share
	found := false
	for _, d := range c.Devices {
		if d.GPU.UUID != uuid || !d.Counted() {
			continue // an adminAccess device is no share: incidents never name it
		}
		s := ShareOf(c, d)
		if found {
			s.SoftBytes += out.SoftBytes
			s.HardBytes += out.HardBytes
		}
		out, found = s, true
	}
	return out, found
}

// RecordsContainerOf finds a client PID's container among the hook's
// records: the PID's cgroup (from /proc/<pid>/cgroup, as the hook found the
// container's) is a recorded container's cgroup or below it, and the record
// lists the GPU.
func RecordsContainerOf(recordDir, procRoot, cgroupRoot string) ContainerOf {
	return func(gpuUUID string, pid int) (Container, bool) {
		cg, err := cdihook.FindCgroup(procRoot, cgroupRoot, pid)
		if err != nil {
			return Container{}, false
		}
		files, _ := filepath.Glob(filepath.Join(recordDir, "*", "*.json"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			var r record.Record
			if json.Unmarshal(raw, &r) != nil || r.Cgroup == "" || !slices.Contains(r.GPUs, gpuUUID) {
				continue
			}
			if cg.Path == filepath.Clean(r.Cgroup) || strings.HasPrefix(cg.Path, filepath.Clean(r.Cgroup)+string(filepath.Separator)) {
				return Container{Namespace: r.Namespace, Pod: r.Pod, Container: r.Container}, true
			}
		}
		return Container{}, false
	}
}
