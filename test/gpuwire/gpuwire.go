// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package gpuwire is the protocol between the two GPU stand-ins of the
// tests: test/mpsdouble, which stands in for NVIDIA's MPS control daemon
// and servers, and its clients, test/fakecuda's CUDA programs (and
// nvidia-cuda-mps-control invoked as a command). Both sides speak it as
// JSON lines over the double's Unix sockets, so both use these types.
package gpuwire

// Request is one message to the daemon's main socket, or one operation of
// a connected client.
type Request struct {
	Kind string   `json:"kind"` // cli, legacy, quit, client
	Args []string `json:"args,omitempty"`
	Cmd  string   `json:"cmd,omitempty"`
	// Client operations after the hello.
	Hello *Hello `json:"hello,omitempty"`
	Op    string `json:"op,omitempty"` // alloc, free, sync, fault
	Bytes int64  `json:"bytes,omitempty"`
	// Device is the GPU an operation of a multi-GPU client is on; empty:
	// its first.
	Device string `json:"device,omitempty"`
}

// Hello is what a client says when it connects: what the driver would
// know about it without asking (its device and its cgroup's soft and hard
// limits, dmem.min and dmem.max), which the fake client reads from the
// environment gpufrac gives the container. A process that uses several
// GPUs of the server lists them in Devices, each with its cgroup's limits
// there (the dmem limits are per device); Device and the byte fields are
// then unused.
type Hello struct {
	Device    string        `json:"device"`
	SoftBytes int64         `json:"softBytes"`
	HardBytes int64         `json:"hardBytes"`
	Cmd       string        `json:"cmd"`
	Devices   []HelloDevice `json:"devices,omitempty"`
}

// HelloDevice is one GPU of a multi-GPU client and its limits there.
type HelloDevice struct {
	Device    string `json:"device"`
	SoftBytes int64  `json:"softBytes"`
	HardBytes int64  `json:"hardBytes"`
}

// Response answers a Request: a command's output or error, or a client
// operation's CUDA result, where the client landed, and why.
type Response struct {
	Out    string `json:"out"`
	Err    string `json:"err,omitempty"`
	Result string `json:"result,omitempty"`
	Route  string `json:"route,omitempty"`
	Why    string `json:"why,omitempty"`
}

// CUDA results a client sees, as NVIDIA names them.
const (
	CUDASuccess      = "CUDA_SUCCESS"
	CUDAOutOfMemory  = "CUDA_ERROR_OUT_OF_MEMORY"
	CUDATerminated   = "CUDA_ERROR_MPS_CLIENT_TERMINATED"
	CUDANoDevice     = "CUDA_ERROR_NO_DEVICE"
	CUDANotPermitted = "CUDA_ERROR_NOT_PERMITTED"
	CUDAInvalidValue = "CUDA_ERROR_INVALID_VALUE"
	// CUDAInvalidDevice: an operation on a device the client does not use.
	CUDAInvalidDevice = "CUDA_ERROR_INVALID_DEVICE"
	// CUDAServerNotReady: the server is recovering from a fatal failure.
	CUDAServerNotReady = "CUDA_ERROR_MPS_SERVER_NOT_READY"
)
