// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// StubDriverVersion is the version of the stub driver InstallStubDriver
// builds.
const StubDriverVersion = "615.10.01"

// StubDriverLibDir is where the stub driver's libraries go under a driver
// root, and so where a container gets them.
const StubDriverLibDir = "usr/lib64"

// StubDriverFiles are the files InstallStubDriver adds under a root.
var StubDriverFiles = []string{
	StubDriverLibDir + "/libcuda.so." + StubDriverVersion,
	StubDriverLibDir + "/libnvidia-ml.so." + StubDriverVersion,
}

// BuildStubDriver compiles the stub driver's libraries with gcc into dir:
// libcuda.so.<version> and libnvidia-ml.so.<version>, shared objects with
// the driver's SONAMEs (libcuda.so.1, libnvidia-ml.so.1) exporting a
// symbol of each, as the installer lays them out. They are never loaded:
// they stand for the files a CDI spec must carry.
func BuildStubDriver(ctx context.Context, dir string) error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return fmt.Errorf("gcc builds the stub driver: %w", err)
	}
	src := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(src, []byte("int cuInit(unsigned int flags) { return flags ? 1 : 0; }\nint nvmlInit_v2(void) { return 0; }\n"), 0o644); err != nil {
		return err
	}
	for _, f := range StubDriverFiles {
		base := filepath.Base(f)
		soname := strings.TrimSuffix(base, StubDriverVersion) + "1"
		out, err := exec.CommandContext(ctx, gcc, "-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", filepath.Join(dir, base), src).CombinedOutput()
		if err != nil {
			return fmt.Errorf("building %s: %w: %s", base, err, out)
		}
	}
	return nil
}

// InstallStubDriver builds the stub driver and copies it under root, as
// the node's processes see root; it returns the paths it added, for
// RemoveFiles. The root's nvidia-smi is the MPS double's
// (InstallMPSDouble).
func (n *RealNode) InstallStubDriver(ctx context.Context, root string) ([]string, error) {
	build, err := os.MkdirTemp("", "gpufrac-stub-driver-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(build) }()
	if err := BuildStubDriver(ctx, build); err != nil {
		return nil, err
	}
	var added []string
	err = n.ns.do(func() error {
		if _, err := os.Stat(filepath.Join(root, "usr/bin/nvidia-smi")); err != nil {
			return fmt.Errorf("the driver root %s has no nvidia-smi (install the MPS double first): %w", root, err)
		}
		for _, f := range StubDriverFiles {
			data, err := os.ReadFile(filepath.Join(build, filepath.Base(f)))
			if err != nil {
				return err
			}
			dst := filepath.Join(root, f)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(dst, data, 0o755); err != nil {
				return err
			}
			added = append(added, dst)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("installing the stub driver under %s on node %s: %w", root, n.Name, err)
	}
	return added, nil
}

// RemoveFiles removes files as the node's processes see them.
func (n *RealNode) RemoveFiles(paths []string) error {
	return n.ns.do(func() error {
		for _, p := range paths {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		return nil
	})
}

var gpuDeviceNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// DriverFilesProblems lists what a container lacks to run CUDA without an
// NVIDIA runtime, from its probe report: libcuda.so.1 and
// libnvidia-ml.so.1 must resolve through its /etc/ld.so.cache to files
// mounted into it that carry those SONAMEs, nvidia-smi must be a mounted
// file on its PATH, its GPU device nodes must be exactly minors', and
// NVIDIA_VISIBLE_DEVICES must have exactly one value. Empty: nothing
// lacks.
func DriverFilesProblems(r *ProbeReport, minors []int64) []string {
	var out []string
	for _, name := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		lib, ok := r.DriverLibs[name]
		switch {
		case !ok:
			out = append(out, name+": the probe did not look it up")
		case lib.Missing != "":
			out = append(out, name+": "+lib.Missing)
		case lib.SONAME != name:
			out = append(out, fmt.Sprintf("%s resolves to %s, whose SONAME is %s", name, lib.RealPath, lib.SONAME))
		case !slices.Contains(r.Mounts, lib.RealPath):
			out = append(out, fmt.Sprintf("%s resolves to %s, which is not mounted from the driver root", name, lib.RealPath))
		}
	}
	if p := r.Bins["nvidia-smi"]; p == "" {
		out = append(out, "nvidia-smi is not on PATH")
	} else if !slices.Contains(r.Mounts, p) {
		out = append(out, "nvidia-smi at "+p+" is the image's, not mounted from the driver root")
	}
	want := map[string]bool{}
	for _, m := range minors {
		want["/dev/nvidia"+strconv.FormatInt(m, 10)] = true
	}
	got := map[string]bool{}
	for p := range r.Devices {
		if gpuDeviceNode.MatchString(p) {
			got[p] = true
		}
	}
	if !maps.Equal(got, want) {
		out = append(out, fmt.Sprintf("GPU device nodes %v, want exactly %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))))
	}
	if n := r.EnvCount["NVIDIA_VISIBLE_DEVICES"]; n != 1 {
		out = append(out, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES is set %d times, want once", n))
	}
	return out
}

// DriverFiles are the report's driver files in lines, for logs and the
// demo.
func (r *ProbeReport) DriverFiles() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(r.DriverLibs)) {
		l := r.DriverLibs[name]
		if l.Missing != "" {
			out = append(out, name+": missing ("+l.Missing+")")
			continue
		}
		out = append(out, fmt.Sprintf("%s → %s (ld.so.cache) → %s (SONAME %s)", name, l.CachePath, l.RealPath, l.SONAME))
	}
	for _, name := range slices.Sorted(maps.Keys(r.Bins)) {
		out = append(out, name+" → "+r.Bins[name])
	}
	return out
}
