// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build linux && (amd64 || arm64)

package purenvml

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The structs nvmlDeviceSetMemoryLimits_v1 and nvmlDeviceGetMemoryLimits_v1
// take, laid out as nvml.h declares them (go-nvml v0.13.4-1's
// pkg/nvml/nvml.h; NVIDIA's structnvmlSetMemoryLimits__v1__t.html): a
// const char* then unsigned long longs, no version member (the version is
// the entry point's _v1 suffix). On amd64 and arm64 a pointer is 8 bytes,
// so there is no padding; layout_test.go pins the offsets.
type setMemoryLimitsV1 struct {
	nameSpace *byte
	softLimit uint64
	hardLimit uint64
}

type getMemoryLimitsV1 struct {
	nameSpace   *byte
	softLimit   uint64
	hardLimit   uint64
	currentUsed uint64
}

// Compile-time size checks: a field added or reordered breaks the build.
var (
	_ [24 - unsafe.Sizeof(setMemoryLimitsV1{})]byte
	_ [unsafe.Sizeof(setMemoryLimitsV1{}) - 24]byte
	_ [32 - unsafe.Sizeof(getMemoryLimitsV1{})]byte
	_ [unsafe.Sizeof(getMemoryLimitsV1{}) - 32]byte
)

// library is libnvidia-ml.so.1 loaded with dlopen. Its entry points are
// bound when it is loaded; the per-cgroup limit calls are optional (absent
// before r615) and answer ERROR_FUNCTION_NOT_FOUND there, as go-nvml does.
type library struct {
	path string

	mu      sync.Mutex
	handle  uintptr
	refs    int
	lastErr string // why the last Init failed, for ErrorString

	initV2      func() int32
	shutdown    func() int32
	errorString func(ret int32) string
	byUUID      func(uuid *byte, device *uintptr) int32
	setLimits   func(device uintptr, limits *setMemoryLimitsV1) int32
	getLimits   func(device uintptr, limits *getMemoryLimitsV1) int32
}

// New returns NVML as the library at path (the driver root's
// libnvidia-ml.so.1); nothing is loaded before Init.
func New(path string) Interface {
	return &library{path: path}
}

// dlopen flags: resolve symbols as they are called (NVIDIA's own loaders
// do, and go-nvml), and keep the library's symbols out of the global
// namespace, which nothing else in the hook uses.
const dlopenFlags = purego.RTLD_LAZY | purego.RTLD_LOCAL

func (l *library) load() error {
	h, err := purego.Dlopen(l.path, dlopenFlags)
	if err != nil {
		return fmt.Errorf("dlopen %s: %w", l.path, err)
	}
	required := []struct {
		name string
		fn   any
	}{
		{"nvmlInit_v2", &l.initV2},
		{"nvmlShutdown", &l.shutdown},
		{"nvmlErrorString", &l.errorString},
		{"nvmlDeviceGetHandleByUUID", &l.byUUID},
	}
	for _, s := range required {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			_ = purego.Dlclose(h)
			return fmt.Errorf("%s has no %s: not NVML: %w", l.path, s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	l.setLimits, l.getLimits = nil, nil
	if sym, err := purego.Dlsym(h, setMemoryLimitsSymbol); err == nil {
		purego.RegisterFunc(&l.setLimits, sym)
	}
	if sym, err := purego.Dlsym(h, getMemoryLimitsSymbol); err == nil {
		purego.RegisterFunc(&l.getLimits, sym)
	}
	l.handle = h
	return nil
}

func (l *library) unload() {
	if l.handle != 0 {
		_ = purego.Dlclose(l.handle)
	}
	l.handle = 0
}

// Init loads the library on the first call and calls nvmlInit_v2, which
// NVML counts: each successful Init needs its Shutdown.
func (l *library) Init() Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		if err := l.load(); err != nil {
			l.lastErr = err.Error()
			return ERROR_LIBRARY_NOT_FOUND
		}
	}
	if ret := Return(l.initV2()); ret != SUCCESS {
		l.lastErr = l.errorString(int32(ret))
		if l.refs == 0 {
			l.unload()
		}
		return ret
	}
	l.lastErr = ""
	l.refs++
	return SUCCESS
}

// Shutdown calls nvmlShutdown and unloads the library after the last.
func (l *library) Shutdown() Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return ERROR_UNINITIALIZED
	}
	ret := Return(l.shutdown())
	l.refs--
	if l.refs == 0 {
		l.unload()
	}
	return ret
}

// ErrorString is nvmlErrorString while the library is loaded; after a
// failed Init it says why (dlopen's message, or NVML's text then).
func (l *library) ErrorString(r Return) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle != 0 {
		return l.errorString(int32(r))
	}
	if l.lastErr != "" {
		return l.lastErr
	}
	return r.Error()
}

// Extensions implements Interface.
func (l *library) Extensions() ExtendedInterface { return symbols{l} }

type symbols struct{ l *library }

// LookupSymbol is dlsym in the loaded library.
func (s symbols) LookupSymbol(name string) error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.l.handle == 0 {
		return fmt.Errorf("%s: %s is not loaded", name, s.l.path)
	}
	_, err := purego.Dlsym(s.l.handle, name)
	return err
}

// cString is s NUL-terminated in Go memory, which the caller keeps alive
// across the call (Go's heap does not move). A string with a NUL inside
// would reach NVML cut short, naming another GPU or cgroup: refused.
func cString(s string) (*byte, bool) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, false
	}
	b := append([]byte(s), 0)
	return &b[0], true
}

// DeviceGetHandleByUUID is nvmlDeviceGetHandleByUUID.
func (l *library) DeviceGetHandleByUUID(uuid string) (Device, Return) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == 0 {
		return nil, ERROR_UNINITIALIZED
	}
	p, ok := cString(uuid)
	if !ok {
		return nil, ERROR_INVALID_ARGUMENT
	}
	var h uintptr
	ret := Return(l.byUUID(p, &h))
	runtime.KeepAlive(p)
	if ret != SUCCESS {
		return nil, ret
	}
	return device{l: l, handle: h}, SUCCESS
}

// device is an nvmlDevice_t of a loaded library.
type device struct {
	l      *library
	handle uintptr
}

// SetMemoryLimits_v1 is nvmlDeviceSetMemoryLimits_v1.
func (d device) SetMemoryLimits_v1(cgroup string, soft, hard uint64) Return {
	d.l.mu.Lock()
	defer d.l.mu.Unlock()
	if d.l.handle == 0 {
		return ERROR_UNINITIALIZED
	}
	if d.l.setLimits == nil {
		return ERROR_FUNCTION_NOT_FOUND
	}
	p, ok := cString(cgroup)
	if !ok {
		return ERROR_INVALID_ARGUMENT
	}
	arg := &setMemoryLimitsV1{nameSpace: p, softLimit: soft, hardLimit: hard}
	ret := Return(d.l.setLimits(d.handle, arg))
	runtime.KeepAlive(arg)
	runtime.KeepAlive(p)
	return ret
}

// GetMemoryLimits_v1 is nvmlDeviceGetMemoryLimits_v1.
func (d device) GetMemoryLimits_v1(cgroup string) (MemoryLimits_v1, Return) {
	d.l.mu.Lock()
	defer d.l.mu.Unlock()
	if d.l.handle == 0 {
		return MemoryLimits_v1{}, ERROR_UNINITIALIZED
	}
	if d.l.getLimits == nil {
		return MemoryLimits_v1{}, ERROR_FUNCTION_NOT_FOUND
	}
	p, ok := cString(cgroup)
	if !ok {
		return MemoryLimits_v1{}, ERROR_INVALID_ARGUMENT
	}
	arg := &getMemoryLimitsV1{nameSpace: p}
	ret := Return(d.l.getLimits(d.handle, arg))
	runtime.KeepAlive(arg)
	runtime.KeepAlive(p)
	return MemoryLimits_v1{NameSpace: cgroup, SoftLimit: arg.softLimit, HardLimit: arg.hardLimit, CurrentUsed: arg.currentUsed}, ret
}
