// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command fakecuda is a CUDA program for machines without a GPU: an MPS
// client of test/mpsdouble that connects through CUDA_MPS_PIPE_DIRECTORY,
// as the CUDA driver does, and allocates device memory against the
// double's per-GPU ledger. It runs a script of steps:
//
//	fakecuda [-soft MiB[,MiB]] [-hard MiB[,MiB]] [-device GPU-uuid[,GPU-uuid]] [-linger duration] alloc <MiB> ... on <GPU-uuid> ... hold <duration> ... fault <name>
//
// fault runs a kernel that raises a fatal GPU exception; -linger keeps a
// failed process connected for a while, as one that ignores the error.
// A process of several GPUs (a multi-GPU share under one MPS server) lists
// them in -device, with one soft and hard limit each; `on` makes the
// following steps work on that GPU (the first one until then).
// alloc is cuMemAlloc; hold keeps the memory for the duration (0: until
// killed), synchronising every 100 ms, which is when an evicted client
// learns it was terminated. Each step prints its CUDA result. Exit status:
// 0 all steps succeeded, 2 not an MPS client, 3 out of memory,
// 4 CUDA_ERROR_MPS_CLIENT_TERMINATED (evicted).
//
// The soft and hard limits default to NVIDIA_GPU_MEMORY_REQUEST and
// NVIDIA_GPU_MEMORY_LIMIT (MiB), the device to NVIDIA_VISIBLE_DEVICES:
// what the real driver would know from the container's cgroup and device
// nodes, told to the double because it has neither.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/test/gpuwire"
)

func main() { os.Exit(run(os.Args[1:])) }

// envMiB reads gpufrac's per-GPU list (NAME + "S", in the order of
// NVIDIA_VISIBLE_DEVICES), or NVIDIA's singular variable.
func envMiB(name string) string {
	if v := os.Getenv(name + "S"); v != "" {
		return v
	}
	return os.Getenv(name)
}

// hello is what the client tells the server: one GPU and its limits, or
// several, each with its own (lists in the order of devices; a single
// limit applies to every GPU).
func helloFor(devices, soft, hard, name string) (*gpuwire.Hello, error) {
	devs := strings.Split(devices, ",")
	softs, hards := strings.Split(soft, ","), strings.Split(hard, ",")
	h := &gpuwire.Hello{Cmd: name}
	for i, d := range devs {
		s, err := nth(softs, i)
		if err != nil {
			return nil, fmt.Errorf("soft limit of %s: %w", d, err)
		}
		hd, err := nth(hards, i)
		if err != nil {
			return nil, fmt.Errorf("hard limit of %s: %w", d, err)
		}
		h.Devices = append(h.Devices, gpuwire.HelloDevice{Device: d, SoftBytes: s << 20, HardBytes: hd << 20})
	}
	if len(h.Devices) == 1 {
		h.Device, h.SoftBytes, h.HardBytes, h.Devices = h.Devices[0].Device, h.Devices[0].SoftBytes, h.Devices[0].HardBytes, nil
	}
	return h, nil
}

// nth is the i-th MiB value of a list, the only one of a one-value list,
// or 0 for none.
func nth(list []string, i int) (int64, error) {
	v := list[0]
	if len(list) > 1 {
		if i >= len(list) {
			return 0, fmt.Errorf("%d values for more GPUs", len(list))
		}
		v = list[i]
	}
	if v == "" {
		return 0, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

func run(args []string) (rc int) {
	fs := flag.NewFlagSet("fakecuda", flag.ContinueOnError)
	soft := fs.String("soft", envMiB("NVIDIA_GPU_MEMORY_REQUEST"), "soft limit (guaranteed) in MiB, one per GPU")
	hard := fs.String("hard", envMiB("NVIDIA_GPU_MEMORY_LIMIT"), "hard limit in MiB, one per GPU; 0 none")
	device := fs.String("device", os.Getenv("NVIDIA_VISIBLE_DEVICES"), "GPU UUIDs, comma-separated")
	name := fs.String("name", "fakecuda", "command name the daemon lists")
	linger := fs.Duration("linger", 0, "after a failed CUDA call, stay connected this long before exiting (a process that ignores the error)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	steps := fs.Args()
	hi, err := helloFor(*device, *soft, *hard, *name)
	if err != nil {
		fmt.Printf("fakecuda: %v\n", err)
		return 1
	}
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if pipe == "" {
		pipe = "/tmp/nvidia-mps"
	}
	conn, err := dial(filepath.Join(pipe, "control"))
	if err != nil {
		// The real driver would silently run without MPS here (DEFAULT
		// compute mode); the fake fails, so a test notices.
		fmt.Printf("not an MPS client: %v\n", err)
		return 2
	}
	defer func() { _ = conn.Close() }()
	defer func() {
		if rc != 0 && *linger > 0 {
			fmt.Printf("lingering for %s\n", *linger)
			time.Sleep(*linger)
		}
	}()
	enc, dec := json.NewEncoder(conn), json.NewDecoder(conn)
	call := func(req gpuwire.Request) gpuwire.Response {
		var resp gpuwire.Response
		if err := enc.Encode(req); err != nil {
			return gpuwire.Response{Err: err.Error()}
		}
		if err := dec.Decode(&resp); err != nil {
			return gpuwire.Response{Err: "connection to the MPS server lost: " + err.Error()}
		}
		return resp
	}
	h := call(gpuwire.Request{Kind: "client", Hello: hi})
	if h.Err != "" {
		fmt.Printf("cuInit: %s\n", h.Err)
		return 2
	}
	fmt.Printf("cuInit: CUDA_SUCCESS: MPS client on %s\n", h.Route)
	return runSteps(steps, call)
}

// runSteps runs the script's steps, each on the current GPU (on).
func runSteps(steps []string, call func(gpuwire.Request) gpuwire.Response) int {
	on := ""
	for i := 0; i < len(steps); i++ {
		if i+1 >= len(steps) {
			fmt.Printf("step %q needs an argument\n", steps[i])
			return 1
		}
		verb, arg := steps[i], steps[i+1]
		i++
		switch verb {
		case "alloc":
			mib, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				fmt.Printf("alloc %q: not MiB\n", arg)
				return 1
			}
			r := call(gpuwire.Request{Op: "alloc", Bytes: mib << 20, Device: on})
			fmt.Printf("cuMemAlloc(%d MiB%s): %s%s\n", mib, onText(on), r.Result, why(r))
			if rc := exitFor(r); rc != 0 {
				return rc
			}
		case "hold":
			d, err := time.ParseDuration(arg)
			if err != nil {
				fmt.Printf("hold %q: %v\n", arg, err)
				return 1
			}
			end := time.Now().Add(d)
			for d == 0 || time.Now().Before(end) {
				r := call(gpuwire.Request{Op: "sync", Device: on})
				if rc := exitFor(r); rc != 0 {
					fmt.Printf("cuCtxSynchronize: %s%s\n", r.Result, why(r))
					return rc
				}
				time.Sleep(100 * time.Millisecond)
			}
			fmt.Printf("held for %s\n", d)
		case "fault":
			// A kernel with a fatal GPU exception (an illegal address),
			// named by arg: the server ends every client of the GPU.
			r := call(gpuwire.Request{Op: "fault", Device: on})
			fmt.Printf("kernel %s: fatal GPU exception: %s%s\n", arg, r.Result, why(r))
			return exitFor(r)
		case "on":
			// cuCtxSetCurrent of the GPU's context.
			on = arg
		default:
			fmt.Printf("unknown step %q (alloc, on, hold, fault)\n", verb)
			return 1
		}
	}
	return 0
}

// onText names the GPU of a step that is not on the first one.
func onText(on string) string {
	if on == "" {
		return ""
	}
	return " on " + on
}

// dial connects to a control socket, through its directory's
// /proc/self/fd name where the path is too long for a unix socket address
// (test harnesses' temporary directories).
func dial(path string) (net.Conn, error) {
	if len(path) < 100 {
		return net.Dial("unix", path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer func() { _ = dir.Close() }()
	return net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}

func why(r gpuwire.Response) string {
	var parts []string
	for _, s := range []string{r.Err, r.Why} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func exitFor(r gpuwire.Response) int {
	switch {
	case r.Err != "":
		return 2
	case r.Result == gpuwire.CUDATerminated:
		return 4
	case r.Result == gpuwire.CUDAOutOfMemory:
		return 3
	case r.Result != gpuwire.CUDASuccess:
		return 1
	}
	return 0
}
