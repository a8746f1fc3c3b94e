// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/apimachinery/pkg/types"
)

// process is a container's CUDA process as NVML lists it: by host PID,
// which the plugin maps to the container through /proc/<pid>/cgroup.
type process struct {
	gpu    string
	claim  types.UID
	cgroup string
}

// startProcess gives the container a process on gpu: a host PID and its
// /proc/<pid>/cgroup line (cgroup v2, relative to the cgroup root).
func (n *node) startProcess(gpu string, claim types.UID, container string) error {
	pid := uint32(4000 + len(n.procs)*7)
	for n.procs[pid].gpu != "" {
		pid++
	}
	rel := filepath.Join("kubepods", string(claim), container)
	dir := filepath.Join(n.procRoot, strconv.Itoa(int(pid)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/"+rel+"\n"), 0o644); err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	n.procs[pid] = process{gpu: gpu, claim: claim, cgroup: filepath.Join(n.cgroupDir, rel)}
	return nil
}

// stopProcesses ends the claim's processes.
func (n *node) stopProcesses(claim types.UID) {
	for pid, p := range n.procs {
		if p.claim == claim {
			delete(n.procs, pid)
			_ = os.RemoveAll(filepath.Join(n.procRoot, strconv.Itoa(int(pid))))
		}
	}
}

// answerProcesses makes dev list the processes of its containers that hold
// memory (an evicted client's is gone until it restarts) with their use,
// and report for each a recent SM sample: busier the more of its request
// it holds, as a serving process whose batch grows.
func (n *node) answerProcesses(dev *server.Device) {
	uuid := dev.UUID
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		var out []nvml.ProcessInfo
		for pid, p := range n.procs {
			if used := n.used[p.cgroup]; p.gpu == uuid && used > 0 {
				out = append(out, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: min(used, n.limits[p.cgroup].HardLimit)})
			}
		}
		return out, nvml.SUCCESS
	}
	dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		var out []nvml.ProcessUtilizationSample
		now := uint64(time.Now().UnixMicro())
		for pid, p := range n.procs {
			used, lim := n.used[p.cgroup], n.limits[p.cgroup]
			if p.gpu != uuid || used == 0 || lim.SoftLimit == 0 {
				continue
			}
			sm := min(100, 60*used/lim.SoftLimit)
			out = append(out, nvml.ProcessUtilizationSample{Pid: pid, SmUtil: uint32(sm), TimeStamp: now})
		}
		if len(out) == 0 {
			// NVML's answer when no sample is newer than the time asked.
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
}
