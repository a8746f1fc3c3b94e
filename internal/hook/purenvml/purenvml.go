// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package purenvml calls the few NVML entry points gpufrac-cdi-hook needs
// without cgo: it loads libnvidia-ml.so.1 with dlopen through
// github.com/ebitengine/purego, so the hook builds with CGO_ENABLED=0 and
// runs on any host glibc from 2.17 on (it runs in the host's namespace,
// where go-nvml's cgo build needed the build machine's glibc). Its types
// mirror go-nvml's names (Interface, Device, Return, MemoryLimits_v1 and
// the return codes) so code written against go-nvml reads the same; the
// return codes and structs are nvml.h's (docs/design/nvidia/nvml.md,
// "NVML without cgo").
package purenvml

import "fmt"

// Return is nvmlReturn_t. It keeps go-nvml's name (not ReturnError) so the
// hook's code reads the same against either.
type Return int32 //nolint:errname // go-nvml's nvml.Return, which cdihook's code is written against

// The nvmlReturn_t values, as nvml.h numbers them.
const (
	SUCCESS                         Return = 0
	ERROR_UNINITIALIZED             Return = 1
	ERROR_INVALID_ARGUMENT          Return = 2
	ERROR_NOT_SUPPORTED             Return = 3
	ERROR_NO_PERMISSION             Return = 4
	ERROR_ALREADY_INITIALIZED       Return = 5
	ERROR_NOT_FOUND                 Return = 6
	ERROR_INSUFFICIENT_SIZE         Return = 7
	ERROR_INSUFFICIENT_POWER        Return = 8
	ERROR_DRIVER_NOT_LOADED         Return = 9
	ERROR_TIMEOUT                   Return = 10
	ERROR_IRQ_ISSUE                 Return = 11
	ERROR_LIBRARY_NOT_FOUND         Return = 12
	ERROR_FUNCTION_NOT_FOUND        Return = 13
	ERROR_CORRUPTED_INFOROM         Return = 14
	ERROR_GPU_IS_LOST               Return = 15
	ERROR_RESET_REQUIRED            Return = 16
	ERROR_OPERATING_SYSTEM          Return = 17
	ERROR_LIB_RM_VERSION_MISMATCH   Return = 18
	ERROR_IN_USE                    Return = 19
	ERROR_MEMORY                    Return = 20
	ERROR_NO_DATA                   Return = 21
	ERROR_VGPU_ECC_NOT_SUPPORTED    Return = 22
	ERROR_INSUFFICIENT_RESOURCES    Return = 23
	ERROR_FREQ_NOT_SUPPORTED        Return = 24
	ERROR_ARGUMENT_VERSION_MISMATCH Return = 25
	ERROR_DEPRECATED                Return = 26
	ERROR_NOT_READY                 Return = 27
	ERROR_GPU_NOT_FOUND             Return = 28
	ERROR_INVALID_STATE             Return = 29
	ERROR_RESET_TYPE_NOT_SUPPORTED  Return = 30
	ERROR_UNKNOWN                   Return = 999
)

// DEVICE_MEMORY_LIMIT_MAX is NVML_DEVICE_MEMORY_LIMIT_MAX: no hard limit.
const DEVICE_MEMORY_LIMIT_MAX uint64 = 0xFFFFFFFFFFFFFFFF

// Error names the code as go-nvml does without a loaded library, so the
// hook's messages read the same as before; Interface.ErrorString asks the
// library for its own text.
func (r Return) Error() string {
	switch r {
	case SUCCESS:
		return "SUCCESS"
	case ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case ERROR_ALREADY_INITIALIZED:
		return "ERROR_ALREADY_INITIALIZED"
	case ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case ERROR_INSUFFICIENT_SIZE:
		return "ERROR_INSUFFICIENT_SIZE"
	case ERROR_INSUFFICIENT_POWER:
		return "ERROR_INSUFFICIENT_POWER"
	case ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case ERROR_IRQ_ISSUE:
		return "ERROR_IRQ_ISSUE"
	case ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case ERROR_CORRUPTED_INFOROM:
		return "ERROR_CORRUPTED_INFOROM"
	case ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case ERROR_RESET_REQUIRED:
		return "ERROR_RESET_REQUIRED"
	case ERROR_OPERATING_SYSTEM:
		return "ERROR_OPERATING_SYSTEM"
	case ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH"
	case ERROR_IN_USE:
		return "ERROR_IN_USE"
	case ERROR_MEMORY:
		return "ERROR_MEMORY"
	case ERROR_NO_DATA:
		return "ERROR_NO_DATA"
	case ERROR_VGPU_ECC_NOT_SUPPORTED:
		return "ERROR_VGPU_ECC_NOT_SUPPORTED"
	case ERROR_INSUFFICIENT_RESOURCES:
		return "ERROR_INSUFFICIENT_RESOURCES"
	case ERROR_FREQ_NOT_SUPPORTED:
		return "ERROR_FREQ_NOT_SUPPORTED"
	case ERROR_ARGUMENT_VERSION_MISMATCH:
		return "ERROR_ARGUMENT_VERSION_MISMATCH"
	case ERROR_DEPRECATED:
		return "ERROR_DEPRECATED"
	case ERROR_NOT_READY:
		return "ERROR_NOT_READY"
	case ERROR_GPU_NOT_FOUND:
		return "ERROR_GPU_NOT_FOUND"
	case ERROR_INVALID_STATE:
		return "ERROR_INVALID_STATE"
	case ERROR_RESET_TYPE_NOT_SUPPORTED:
		return "ERROR_RESET_TYPE_NOT_SUPPORTED"
	case ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	}
	return fmt.Sprintf("unknown return value: %d", int32(r))
}

// String is Error.
func (r Return) String() string { return r.Error() }

// MemoryLimits_v1 is what nvmlDeviceGetMemoryLimits_v1 fills in
// (nvmlGetMemoryLimits_v1_t), in Go types.
type MemoryLimits_v1 struct {
	NameSpace   string
	SoftLimit   uint64
	HardLimit   uint64
	CurrentUsed uint64
}

// Interface is the part of NVML the hook calls, with go-nvml's method
// names and meanings.
type Interface interface {
	// Init is nvmlInit_v2 (loading the library first when needed).
	Init() Return
	// Shutdown is nvmlShutdown (unloading the library after the last).
	Shutdown() Return
	// DeviceGetHandleByUUID is nvmlDeviceGetHandleByUUID.
	DeviceGetHandleByUUID(uuid string) (Device, Return)
	// ErrorString is nvmlErrorString where the library is loaded.
	ErrorString(r Return) string
	// Extensions looks up symbols in the loaded library.
	Extensions() ExtendedInterface
}

// ExtendedInterface is go-nvml's: a symbol lookup in the loaded library.
type ExtendedInterface interface {
	LookupSymbol(name string) error
}

// Device is the part of nvmlDevice_t's calls the hook makes.
type Device interface {
	// SetMemoryLimits_v1 is nvmlDeviceSetMemoryLimits_v1 with an
	// nvmlSetMemoryLimits_v1_t of cgroup, soft and hard.
	SetMemoryLimits_v1(cgroup string, soft, hard uint64) Return
	// GetMemoryLimits_v1 is nvmlDeviceGetMemoryLimits_v1.
	GetMemoryLimits_v1(cgroup string) (MemoryLimits_v1, Return)
}
