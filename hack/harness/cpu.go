// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100
// on every Linux architecture Go runs on (it is part of the kernel's ABI,
// fixed whatever the kernel's own tick rate; sysconf(_SC_CLK_TCK) returns
// it, which needs cgo to call).
const userHZ = 100

// SelfProcess is the name CPUSeconds gives the process the harness runs in
// (a test or a benchmark, and anything it runs in process, such as
// gpufrac-controller started by StartPacking).
const SelfProcess = "self"

// CPUSeconds returns the CPU time (user and system) each control-plane
// component the harness started has used so far, by name (etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager), and this
// process's as SelfProcess, read from /proc/PID/stat. A benchmark takes two
// readings and subtracts: CPU time is what a shared machine disturbs
// least (a busy neighbour slows a component but does not make it use more
// CPU for the same work).
func (cp *ControlPlane) CPUSeconds() (map[string]float64, error) {
	cp.mu.Lock()
	procs := slices.Clone(cp.procs)
	cp.mu.Unlock()
	out := make(map[string]float64, len(procs)+1)
	for _, p := range procs {
		if p.cmd.Process == nil {
			continue
		}
		s, err := processCPUSeconds(p.cmd.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("reading the CPU time of %s: %w", p.name, err)
		}
		out[p.name] += s
	}
	s, err := processCPUSeconds(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("reading this process's CPU time: %w", err)
	}
	out[SelfProcess] = s
	return out, nil
}

// processCPUSeconds is utime + stime of /proc/PID/stat in seconds.
func processCPUSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(raw))
}

// parseStatCPU reads utime and stime (fields 14 and 15, proc(5)) from a
// /proc/PID/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func parseStatCPU(stat string) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("stat line %.40q: no command name in parentheses", stat)
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is field 3 (state), so field n is fields[n-3].
	if len(fields) < 13 {
		return 0, fmt.Errorf("stat line %.40q: %d fields after the command name, want at least 13", stat, len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat field %q: %w", f, err)
		}
		ticks += v
	}
	return float64(ticks) / userHZ, nil
}
