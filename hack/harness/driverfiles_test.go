// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// goodReport is what a container with the whole driver prints.
const goodReport = `PROBE BEGIN
ENV NVIDIA_VISIBLE_DEVICES=GPU-3
DEV /dev/nvidiactl c 195:255
DEV /dev/nvidia3 c 195:3
MOUNT /usr/lib64/libcuda.so.615.10.01
MOUNT /usr/lib64/libnvidia-ml.so.615.10.01
MOUNT /usr/bin/nvidia-smi
LDCACHE libcuda.so.1 /usr/lib64/libcuda.so.1
DRIVERLIB libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/lib64/libcuda.so.615.10.01 libcuda.so.1
DRIVERLIB libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.615.10.01 libnvidia-ml.so.1
BIN nvidia-smi /usr/bin/nvidia-smi
PROBE END
`

func TestDriverFilesProblemsPassesACompleteContainer(t *testing.T) {
	if p := DriverFilesProblems(ParseProbe(goodReport), []int64{3}); len(p) != 0 {
		t.Errorf("a complete container: %v", p)
	}
}

// Each planted miss is found, and named.
func TestDriverFilesProblemsFindsEachMiss(t *testing.T) {
	for name, c := range map[string]struct {
		old, new string
		want     string
	}{
		"libcuda not in the cache": {"DRIVERLIB libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/lib64/libcuda.so.615.10.01 libcuda.so.1", "DRIVERLIB libcuda.so.1 missing not in /etc/ld.so.cache", "libcuda.so.1: not in"},
		"libcuda never looked up":  {"DRIVERLIB libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/lib64/libcuda.so.615.10.01 libcuda.so.1\n", "", "did not look it up"},
		"NVML not mounted":         {"MOUNT /usr/lib64/libnvidia-ml.so.615.10.01\n", "", "libnvidia-ml.so.1 resolves to /usr/lib64/libnvidia-ml.so.615.10.01, which is not mounted"},
		"wrong SONAME":             {"libnvidia-ml.so.615.10.01 libnvidia-ml.so.1\n", "libnvidia-ml.so.615.10.01 libnvidia-ml.so.2\n", "whose SONAME is libnvidia-ml.so.2"},
		"no nvidia-smi":            {"BIN nvidia-smi /usr/bin/nvidia-smi\n", "", "nvidia-smi is not on PATH"},
		"the image's nvidia-smi":   {"MOUNT /usr/bin/nvidia-smi\n", "", "the image's"},
		"its GPU's node missing":   {"DEV /dev/nvidia3 c 195:3\n", "", "GPU device nodes [], want exactly [/dev/nvidia3]"},
		"another GPU's node":       {"DEV /dev/nvidia3 c 195:3\n", "DEV /dev/nvidia3 c 195:3\nDEV /dev/nvidia4 c 195:4\n", "want exactly [/dev/nvidia3]"},
		"two visible-devices":      {"ENV NVIDIA_VISIBLE_DEVICES=GPU-3\n", "ENV NVIDIA_VISIBLE_DEVICES=GPU-3\nENV NVIDIA_VISIBLE_DEVICES=all\n", "set 2 times"},
		"no visible-devices":       {"ENV NVIDIA_VISIBLE_DEVICES=GPU-3\n", "", "set 0 times"},
	} {
		t.Run(name, func(t *testing.T) {
			report := strings.Replace(goodReport, c.old, c.new, 1)
			if report == goodReport {
				t.Fatalf("the plant %q changed nothing", c.old)
			}
			p := DriverFilesProblems(ParseProbe(report), []int64{3})
			if len(p) != 1 || !strings.Contains(p[0], c.want) {
				t.Errorf("problems %q, want one naming %q", p, c.want)
			}
		})
	}
}

// The stub driver's libraries are shared objects with the driver's
// SONAMEs.
func TestBuildStubDriver(t *testing.T) {
	_, err := exec.LookPath("gcc")
	mustrun.Need(t, err == nil, "gcc is not on PATH: the stub driver is compiled from C")
	dir := t.TempDir()
	if err := BuildStubDriver(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"libcuda.so." + StubDriverVersion: "libcuda.so.1", "libnvidia-ml.so." + StubDriverVersion: "libnvidia-ml.so.1"} {
		e, err := elf.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		soname, err := e.DynString(elf.DT_SONAME)
		_ = e.Close()
		if err != nil || len(soname) != 1 || soname[0] != want || e.Type != elf.ET_DYN {
			t.Errorf("%s: SONAME %v (%v), type %v, want %s, a shared object", f, soname, err, e.Type, want)
		}
	}
}
