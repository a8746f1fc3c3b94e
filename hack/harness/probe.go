// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bufio"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ProbeReport is what the probe of NodeImage (test/e2e/e2e-probe) printed
// inside a container on a real node.
type ProbeReport struct {
	Env     map[string]string
	Devices map[string]string // path → "c major:minor"
	Mounts  []string
	MPSPipe []string // files in CUDA_MPS_PIPE_DIRECTORY
	// EnvCount counts each variable's entries: a runtime that appends
	// instead of replacing leaves two.
	EnvCount map[string]int
	// DriverLibs are the driver libraries as the container's
	// /etc/ld.so.cache resolves them (name → what the probe found).
	DriverLibs map[string]DriverLib
	// Bins are the driver's binaries found on PATH (name → path).
	Bins map[string]string
	// Shm is the mount the container sees on /dev/shm: device, file
	// system type, source, mount options, super options.
	Shm []string
}

// DriverLib is one driver library resolved through the container's
// linker cache; Missing says why it was not.
type DriverLib struct {
	CachePath, RealPath, SONAME string
	Missing                     string
}

// Probe reads the report of a container running /probe from its log;
// ok is false while the report is not complete yet.
func (n *RealNode) Probe(pod *v1.Pod, container string) (_ *ProbeReport, ok bool, _ error) {
	out, err := n.ContainerLog(pod, container)
	if err != nil {
		return nil, false, err
	}
	if !strings.Contains(out, "PROBE END") {
		return nil, false, nil
	}
	return ParseProbe(out), true, nil
}

// ParseProbe reads the probe's "KIND value" lines.
func ParseProbe(out string) *ProbeReport {
	r := &ProbeReport{Env: map[string]string{}, Devices: map[string]string{}, EnvCount: map[string]int{},
		DriverLibs: map[string]DriverLib{}, Bins: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			r.Env[k] = v
			r.EnvCount[k]++
		case "DEV":
			path, dev, _ := strings.Cut(rest, " ")
			r.Devices[path] = dev
		case "MOUNT":
			r.Mounts = append(r.Mounts, rest)
		case "MPSPIPE":
			r.MPSPipe = append(r.MPSPipe, rest)
		case "DRIVERLIB":
			name, found, _ := strings.Cut(rest, " ")
			if why, missing := strings.CutPrefix(found, "missing "); missing {
				r.DriverLibs[name] = DriverLib{Missing: why}
			} else if f := strings.Fields(found); len(f) == 3 {
				r.DriverLibs[name] = DriverLib{CachePath: f[0], RealPath: f[1], SONAME: f[2]}
			} else {
				r.DriverLibs[name] = DriverLib{Missing: "unreadable probe line: " + found}
			}
		case "BIN":
			name, path, _ := strings.Cut(rest, " ")
			r.Bins[name] = path
		case "SHMMOUNT":
			r.Shm = strings.Fields(rest)
		}
	}
	return r
}

// String is the report in a line, for logs.
func (r *ProbeReport) String() string {
	return fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%s NVIDIA_GPU_MEMORY_REQUEST=%s NVIDIA_GPU_MEMORY_LIMIT=%s GPUFRAC_CLAIM=%s CUDA_MPS_PIPE_DIRECTORY=%q devices=%v MPS pipe=%v",
		r.Env["NVIDIA_VISIBLE_DEVICES"], r.Env["NVIDIA_GPU_MEMORY_REQUEST"], r.Env["NVIDIA_GPU_MEMORY_LIMIT"], r.Env["GPUFRAC_CLAIM"],
		r.Env["CUDA_MPS_PIPE_DIRECTORY"], r.Devices, r.MPSPipe)
}
