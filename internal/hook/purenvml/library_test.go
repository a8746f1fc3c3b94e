// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build linux && (amd64 || arm64)

package purenvml

import (
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpufrac/gpufrac/internal/hook/nvmltest"
)

const (
	gpuA  = "GPU-11111111-2222-3333-4444-555555555555"
	total = uint64(80) << 30
)

// standIn builds the stand-in NVML and points it at a fresh record file.
func standIn(t *testing.T, withLimits bool) (lib, rec string) {
	t.Helper()
	lib = nvmltest.Build(t, t.TempDir(), withLimits)
	rec = filepath.Join(t.TempDir(), "calls.jsonl")
	t.Setenv(nvmltest.EnvRecord, rec)
	t.Setenv(nvmltest.EnvGPUs, nvmltest.GPUs(map[string]uint64{gpuA: total}))
	return lib, rec
}

func calls(t *testing.T, rec string) []nvmltest.Call {
	t.Helper()
	c, err := nvmltest.Calls(rec)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStructLayoutIsNVMLs pins the Go structs to nvml.h's members: the
// name pointer at 0, then the unsigned long longs at 8, 16 (and 24).
func TestStructLayoutIsNVMLs(t *testing.T) {
	var s setMemoryLimitsV1
	var g getMemoryLimitsV1
	got := []uintptr{unsafe.Offsetof(s.nameSpace), unsafe.Offsetof(s.softLimit), unsafe.Offsetof(s.hardLimit), unsafe.Sizeof(s),
		unsafe.Offsetof(g.nameSpace), unsafe.Offsetof(g.softLimit), unsafe.Offsetof(g.hardLimit), unsafe.Offsetof(g.currentUsed), unsafe.Sizeof(g)}
	want := []uintptr{0, 8, 16, 24, 0, 8, 16, 24, 32}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("offsets and sizes %v, want nvml.h's %v", got, want)
		}
	}
}

// TestSetAndGetReachNVMLAsSent: through dlopen, the stand-in reads the
// UUID, the cgroup path and both limits the hook passed, from a struct of
// nvml.h's size, and Get reads them back.
func TestSetAndGetReachNVMLAsSent(t *testing.T) {
	libPath, rec := standIn(t, true)
	cg := t.TempDir()
	l := New(libPath)
	if ret := l.Init(); ret != SUCCESS {
		t.Fatalf("Init: %v (%s)", ret, l.ErrorString(ret))
	}
	if err := l.Extensions().LookupSymbol(setMemoryLimitsSymbol); err != nil {
		t.Fatalf("LookupSymbol(%s): %v", setMemoryLimitsSymbol, err)
	}
	dev, ret := l.DeviceGetHandleByUUID(gpuA)
	if ret != SUCCESS {
		t.Fatalf("DeviceGetHandleByUUID: %v", ret)
	}
	if ret := dev.SetMemoryLimits_v1(cg, 3<<30, 5<<30); ret != SUCCESS {
		t.Fatalf("SetMemoryLimits_v1: %v", ret)
	}
	got, ret := dev.GetMemoryLimits_v1(cg)
	if ret != SUCCESS || got.SoftLimit != 3<<30 || got.HardLimit != 5<<30 || got.NameSpace != cg {
		t.Fatalf("GetMemoryLimits_v1 = %+v, %v; want soft 3 GiB, hard 5 GiB of %s", got, ret, cg)
	}
	if ret := l.Shutdown(); ret != SUCCESS {
		t.Fatalf("Shutdown: %v", ret)
	}
	var set *nvmltest.Call
	for _, c := range calls(t, rec) {
		if c.Call == "nvmlDeviceSetMemoryLimits_v1" {
			set = &c
		}
	}
	if set == nil || set.UUID != gpuA || set.NameSpace != cg || set.SoftLimit != 3<<30 || set.HardLimit != 5<<30 || set.StructSize != 24 || set.Ret != 0 {
		t.Fatalf("NVML saw %+v; want %s, %s, soft %d, hard %d, a 24-byte nvmlSetMemoryLimits_v1_t", set, gpuA, cg, uint64(3<<30), uint64(5<<30))
	}
}

// TestRefusalsComeBackAsNVMLReturns: the codes NVML returns reach the
// caller unchanged, and nvmlErrorString names them.
func TestRefusalsComeBackAsNVMLReturns(t *testing.T) {
	libPath, _ := standIn(t, true)
	l := New(libPath)
	if _, ret := l.DeviceGetHandleByUUID(gpuA); ret != ERROR_UNINITIALIZED {
		t.Errorf("before Init: %v, want ERROR_UNINITIALIZED", ret)
	}
	if ret := l.Init(); ret != SUCCESS {
		t.Fatal(ret)
	}
	defer func() { _ = l.Shutdown() }()
	if _, ret := l.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != ERROR_NOT_FOUND {
		t.Errorf("unknown UUID: %v, want ERROR_NOT_FOUND", ret)
	}
	if s := l.ErrorString(ERROR_NOT_FOUND); s != "Not Found" {
		t.Errorf("ErrorString(ERROR_NOT_FOUND) = %q, want the library's %q", s, "Not Found")
	}
	dev, _ := l.DeviceGetHandleByUUID(gpuA)
	cg := t.TempDir()
	for _, c := range []struct {
		name       string
		cgroup     string
		soft, hard uint64
		want       Return
	}{
		{"soft above hard", cg, 6, 5, ERROR_INVALID_ARGUMENT},
		{"above the GPU", cg, 0, total + 1, ERROR_INVALID_ARGUMENT},
		{"no limit is allowed", cg, 1, DEVICE_MEMORY_LIMIT_MAX, SUCCESS},
		{"cgroup gone", filepath.Join(cg, "gone"), 1, 2, ERROR_OPERATING_SYSTEM},
		{"NUL in the path", cg + "\x00/other", 1, 2, ERROR_INVALID_ARGUMENT},
	} {
		if ret := dev.SetMemoryLimits_v1(c.cgroup, c.soft, c.hard); ret != c.want {
			t.Errorf("%s: %v, want %v", c.name, ret, c.want)
		}
	}
	if _, ret := dev.GetMemoryLimits_v1(t.TempDir()); ret != ERROR_NOT_FOUND {
		t.Errorf("Get of a cgroup never set: %v, want ERROR_NOT_FOUND", ret)
	}
}

// TestStandInRefusesUninitialisedCalls: the stand-in is as strict as NVML
// when the caller skips nvmlInit_v2 (called through the raw entry points,
// which the loader itself never does).
func TestStandInRefusesUninitialisedCalls(t *testing.T) {
	libPath, _ := standIn(t, true)
	l := &library{path: libPath}
	if err := l.load(); err != nil {
		t.Fatal(err)
	}
	defer l.unload()
	var h uintptr
	p, _ := cString(gpuA)
	if ret := Return(l.byUUID(p, &h)); ret != ERROR_UNINITIALIZED {
		t.Errorf("nvmlDeviceGetHandleByUUID before nvmlInit_v2: %v, want ERROR_UNINITIALIZED", ret)
	}
	if ret := Return(l.shutdown()); ret != ERROR_UNINITIALIZED {
		t.Errorf("nvmlShutdown before nvmlInit_v2: %v, want ERROR_UNINITIALIZED", ret)
	}
	if ret := Return(l.setLimits(h, &setMemoryLimitsV1{nameSpace: p})); ret != ERROR_UNINITIALIZED {
		t.Errorf("nvmlDeviceSetMemoryLimits_v1 before nvmlInit_v2: %v, want ERROR_UNINITIALIZED", ret)
	}
}

// TestDriverBeforeR615: a library without the limit entry points loads,
// LookupSymbol says the symbol is missing, and the calls answer
// ERROR_FUNCTION_NOT_FOUND as go-nvml's do.
func TestDriverBeforeR615(t *testing.T) {
	libPath, _ := standIn(t, false)
	l := New(libPath)
	if ret := l.Init(); ret != SUCCESS {
		t.Fatal(ret)
	}
	defer func() { _ = l.Shutdown() }()
	if err := l.Extensions().LookupSymbol(setMemoryLimitsSymbol); err == nil {
		t.Errorf("LookupSymbol(%s) found it in a driver without it", setMemoryLimitsSymbol)
	}
	dev, ret := l.DeviceGetHandleByUUID(gpuA)
	if ret != SUCCESS {
		t.Fatal(ret)
	}
	if ret := dev.SetMemoryLimits_v1(t.TempDir(), 1, 2); ret != ERROR_FUNCTION_NOT_FOUND {
		t.Errorf("SetMemoryLimits_v1: %v, want ERROR_FUNCTION_NOT_FOUND", ret)
	}
	if _, ret := dev.GetMemoryLimits_v1(t.TempDir()); ret != ERROR_FUNCTION_NOT_FOUND {
		t.Errorf("GetMemoryLimits_v1: %v, want ERROR_FUNCTION_NOT_FOUND", ret)
	}
}

// TestLoadFailuresSayWhy: no library, or a library that is not NVML, is
// ERROR_LIBRARY_NOT_FOUND with dlopen's or dlsym's reason.
func TestLoadFailuresSayWhy(t *testing.T) {
	l := New(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	if ret := l.Init(); ret != ERROR_LIBRARY_NOT_FOUND {
		t.Fatalf("missing library: %v", ret)
	}
	if s := l.ErrorString(ERROR_LIBRARY_NOT_FOUND); !strings.Contains(s, "dlopen") {
		t.Errorf("ErrorString after a failed load = %q, want dlopen's reason", s)
	}
	// libc is a shared library without NVML's entry points.
	l = New("libc.so.6")
	if ret := l.Init(); ret != ERROR_LIBRARY_NOT_FOUND {
		t.Fatalf("libc as NVML: %v", ret)
	}
	if s := l.ErrorString(ERROR_LIBRARY_NOT_FOUND); !strings.Contains(s, "has no nvmlInit_v2") {
		t.Errorf("ErrorString = %q, want the missing symbol", s)
	}
	if ret := l.Shutdown(); ret != ERROR_UNINITIALIZED {
		t.Errorf("Shutdown without Init: %v", ret)
	}
}

// TestInitIsCounted: the library stays loaded until the last Shutdown,
// and a handle is refused once it is unloaded.
func TestInitIsCounted(t *testing.T) {
	libPath, _ := standIn(t, true)
	l := New(libPath)
	for range 2 {
		if ret := l.Init(); ret != SUCCESS {
			t.Fatal(ret)
		}
	}
	dev, _ := l.DeviceGetHandleByUUID(gpuA)
	_ = l.Shutdown()
	if ret := dev.SetMemoryLimits_v1(t.TempDir(), 1, 2); ret != SUCCESS {
		t.Errorf("after one of two Shutdowns: %v", ret)
	}
	_ = l.Shutdown()
	if ret := dev.SetMemoryLimits_v1(t.TempDir(), 1, 2); ret != ERROR_UNINITIALIZED {
		t.Errorf("after the last Shutdown: %v, want ERROR_UNINITIALIZED", ret)
	}
}
