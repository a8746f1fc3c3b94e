// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fractionmetrics

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
)

// utilizationWindow is how far back a scrape looks for NVML's per-process
// SM samples. The driver samples every few hundred milliseconds and keeps
// a short ring; a window of a typical scrape interval's order gives each
// process its latest sample without averaging stale ones in.
const utilizationWindow = 20 * time.Second

// cgroupUsage is what one cgroup's processes use on one GPU.
type cgroupUsage struct {
	memoryBytes uint64
	memoryKnown bool
	smPercent   uint32
	smKnown     bool
}

// gpuProcesses attributes a GPU's processes to cgroups. NVML reports
// processes by host PID only; /proc/<pid>/cgroup names the container.
// Per-process memory is the fallback where the node cannot account memory
// per cgroup (no dmem), and SM utilisation always comes from here: NVML
// has no per-cgroup SM counter, and dcgm-exporter reports only the
// device-wide figure for shared GPUs.
type gpuProcesses struct {
	byCgroup map[string]*cgroupUsage
}

// readProcesses asks NVML for the GPU's compute processes and their recent
// SM samples and maps each PID to its cgroup. A PID that has exited
// between the two reads is skipped: its usage belongs to no live
// container.
func (c *Collector) readProcesses(dev nvml.Device, now time.Time) *gpuProcesses {
	g := &gpuProcesses{byCgroup: map[string]*cgroupUsage{}}
	cgroupOf := map[uint32]string{}
	lookup := func(pid uint32) string {
		if cg, ok := cgroupOf[pid]; ok {
			return cg
		}
		cg, err := cdihook.FindCgroup(c.procRoot(), c.cfg.CgroupRoot, int(pid))
		if err != nil {
			cgroupOf[pid] = ""
			return ""
		}
		cgroupOf[pid] = cg.Path
		return cg.Path
	}
	usage := func(cg string) *cgroupUsage {
		u := g.byCgroup[cg]
		if u == nil {
			u = &cgroupUsage{}
			g.byCgroup[cg] = u
		}
		return u
	}
	// MPS clients show up as compute processes too (the server holds their
	// memory on their behalf, but NVML attributes it to the client PID).
	if procs, ret := dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range procs {
			if cg := lookup(p.Pid); cg != "" {
				u := usage(cg)
				u.memoryBytes += p.UsedGpuMemory
				u.memoryKnown = true
			}
		}
	}
	since := uint64(now.Add(-utilizationWindow).UnixMicro())
	if samples, ret := dev.GetProcessUtilization(since); ret == nvml.SUCCESS {
		latest := map[uint32]nvml.ProcessUtilizationSample{}
		for _, s := range samples {
			if prev, ok := latest[s.Pid]; !ok || s.TimeStamp > prev.TimeStamp {
				latest[s.Pid] = s
			}
		}
		for pid, s := range latest {
			if cg := lookup(pid); cg != "" {
				u := usage(cg)
				u.smPercent += s.SmUtil
				u.smKnown = true
			}
		}
	}
	return g
}

// forContainer sums what the processes in the container's cgroup and its
// descendants use: runtimes may start exec'd processes in sub-cgroups.
func (g *gpuProcesses) forContainer(cgroup string) cgroupUsage {
	var total cgroupUsage
	prefix := filepath.Clean(cgroup) + string(filepath.Separator)
	for cg, u := range g.byCgroup {
		if cg != filepath.Clean(cgroup) && !strings.HasPrefix(cg, prefix) {
			continue
		}
		total.memoryBytes += u.memoryBytes
		total.memoryKnown = total.memoryKnown || u.memoryKnown
		total.smPercent += u.smPercent
		total.smKnown = total.smKnown || u.smKnown
	}
	// Samples of several processes of one container can overlap in time;
	// the container cannot use more than the whole GPU.
	total.smPercent = min(total.smPercent, 100)
	return total
}

func (c *Collector) procRoot() string {
	if c.cfg.ProcRoot != "" {
		return c.cfg.ProcRoot
	}
	return "/proc"
}
