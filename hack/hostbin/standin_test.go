// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hostbin_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/hook/nvmltest"
	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
)

const (
	gpuA     = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
	gpuB     = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
	gpuBytes = uint64(80) << 30
	pid      = 4242
	scope    = "kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope"
)

// hookNode is a host for the hook: a driver root holding the stand-in
// NVML where a host driver keeps libnvidia-ml.so.1, a /proc naming the
// container's cgroup (v2), and that cgroup's directory.
type hookNode struct {
	hook, driverRoot, procRoot, cgroupRoot, record string
}

func newHookNode(t *testing.T, hook string, withLimits bool) hookNode {
	t.Helper()
	n := hookNode{hook: hook, driverRoot: t.TempDir(), procRoot: t.TempDir(), cgroupRoot: t.TempDir()}
	nvmltest.Build(t, filepath.Join(n.driverRoot, "usr/lib64"), withLimits)
	n.record = filepath.Join(t.TempDir(), "nvml-calls.jsonl")
	proc := filepath.Join(n.procRoot, fmt.Sprint(pid))
	if err := os.MkdirAll(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "cgroup"), []byte("0::/"+scope+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(n.cgroupRoot, scope), 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// run runs the built hook as a runtime does: the OCI state on stdin, the
// limits as the CDI spec writes them; the stand-in's GPUs and record file
// through its environment.
func (n hookNode) run(t *testing.T, gpus ...string) (string, error) {
	t.Helper()
	args := []string{"apply", "--driver-root", n.driverRoot, "--proc-root", n.procRoot, "--cgroup-root", n.cgroupRoot}
	for _, g := range gpus {
		args = append(args, "--gpu", g)
	}
	cmd := exec.CommandContext(t.Context(), n.hook, args...)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.2.0","id":"abc","status":"created","pid":%d,"bundle":"/run/b"}`, pid))
	cmd.Env = append(os.Environ(),
		nvmltest.EnvRecord+"="+n.record,
		nvmltest.EnvGPUs+"="+nvmltest.GPUs(map[string]uint64{gpuA: gpuBytes, gpuB: gpuBytes}))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (n hookNode) calls(t *testing.T) []nvmltest.Call {
	t.Helper()
	c, err := nvmltest.Calls(n.record)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func limit(uuid string, soft, hard uint64) string { return fmt.Sprintf("%s=%d:%d", uuid, soft, hard) }

// TestHookSetsLimitsThroughAStandInNVML runs the real hook binary, built
// as released (no cgo, NVML through dlopen), against a stand-in
// libnvidia-ml.so.1 compiled from C, and checks what NVML receives: the
// GPU's UUID, the container's cgroup path, the soft and hard bytes, read
// from a struct of nvmlSetMemoryLimits_v1_t's size through the _v1 entry
// point (nvml.h gives that struct no version member: the version is the
// entry point's), between nvmlInit_v2 and nvmlShutdown; then the reset
// of the reservation root to 0 (docs/enforcement.md).
func TestHookSetsLimitsThroughAStandInNVML(t *testing.T) {
	dir, _ := buildHostBinaries(t)
	n := newHookNode(t, filepath.Join(dir, "gpufrac-cdi-hook"), true)
	out, err := n.run(t, limit(gpuA, 40<<30, 60<<30), limit(gpuB, 1<<30, 1<<30))
	if err != nil {
		t.Fatalf("hook: %v\n%s", err, out)
	}
	cg := filepath.Join(n.cgroupRoot, scope)
	want := []nvmltest.Call{
		{Call: "nvmlInit_v2"},
		{Call: "nvmlDeviceGetHandleByUUID", UUID: gpuA},
		{Call: "nvmlDeviceSetMemoryLimits_v1", UUID: gpuA, NameSpace: cg, SoftLimit: 40 << 30, HardLimit: 60 << 30, StructSize: 24},
		{Call: "nvmlDeviceGetHandleByUUID", UUID: gpuB},
		{Call: "nvmlDeviceSetMemoryLimits_v1", UUID: gpuB, NameSpace: cg, SoftLimit: 1 << 30, HardLimit: 1 << 30, StructSize: 24},
		{Call: "nvmlShutdown"},
	}
	// Then NVIDIA's reservation model: the root (the highest cgroup below
	// the mount) is read and forced to soft 0 with its own hard limit,
	// none here (NOT_FOUND: no limit of its own, so NVML's maximum).
	root := filepath.Join(n.cgroupRoot, strings.Split(scope, "/")[0])
	want = append(want, nvmltest.Call{Call: "nvmlInit_v2"})
	for _, uuid := range []string{gpuA, gpuB} {
		want = append(want,
			nvmltest.Call{Call: "nvmlDeviceGetHandleByUUID", UUID: uuid},
			nvmltest.Call{Call: "nvmlDeviceGetMemoryLimits_v1", Ret: int(purenvml.ERROR_NOT_FOUND), UUID: uuid, NameSpace: root, StructSize: 24},
			nvmltest.Call{Call: "nvmlDeviceSetMemoryLimits_v1", UUID: uuid, NameSpace: root, SoftLimit: 0, HardLimit: purenvml.DEVICE_MEMORY_LIMIT_MAX, StructSize: 24})
	}
	want = append(want, nvmltest.Call{Call: "nvmlShutdown"})
	got := n.calls(t)
	if len(got) != len(want) {
		t.Fatalf("NVML received %d calls, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: NVML received %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestHookReportsNVMLsRefusals: what the stand-in refuses, as NVML does,
// fails the hook (so the container) with the code and what to do.
func TestHookReportsNVMLsRefusals(t *testing.T) {
	dir, _ := buildHostBinaries(t)
	hook := filepath.Join(dir, "gpufrac-cdi-hook")
	for _, c := range []struct {
		name       string
		withLimits bool
		gpu        string
		removeCg   bool
		want       string
	}{
		{"unknown GPU", true, limit("GPU-00000000-0000-0000-0000-000000000000", 1, 2), false, "is not on this node: ERROR_NOT_FOUND"},
		// The hook's argument parser refuses soft above hard before NVML
		// sees it; the stand-in's own refusal is tested in purenvml.
		{"above the GPU", true, limit(gpuA, 1, gpuBytes+1), false, "ERROR_INVALID_ARGUMENT: the soft limit is above the hard limit, or a limit is above the GPU's total memory"},
		{"cgroup gone", true, limit(gpuA, 1, 2), true, "ERROR_OPERATING_SYSTEM: the driver cannot open the container's cgroup"},
		{"driver before r615", false, limit(gpuA, 1, 2), false, "this NVIDIA driver cannot set per-container GPU memory limits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newHookNode(t, hook, c.withLimits)
			if c.removeCg {
				if err := os.Remove(filepath.Join(n.cgroupRoot, scope)); err != nil {
					t.Fatal(err)
				}
			}
			out, err := n.run(t, c.gpu)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("hook: %v, output %q; want it to fail with %q", err, out, c.want)
			}
			for _, call := range n.calls(t) {
				if call.Call == "nvmlDeviceSetMemoryLimits_v1" && call.Ret == 0 {
					t.Errorf("NVML accepted %+v", call)
				}
			}
		})
	}
}
