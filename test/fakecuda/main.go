// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command fakecuda is a CUDA program for machines without a GPU: an MPS
// client of test/mpsdouble that connects through CUDA_MPS_PIPE_DIRECTORY,
// as the CUDA driver does, and allocates device memory against the
// double's per-GPU ledger. It runs a script of steps:
//
//	fakecuda [-soft MiB] [-hard MiB] [-device GPU-uuid] [-linger duration] alloc <MiB> ... hold <duration> ... fault <name>
//
// fault runs a kernel that raises a fatal GPU exception; -linger keeps a
// failed process connected for a while, as one that ignores the error.
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
)

type request struct {
	Kind  string `json:"kind"`
	Hello *hello `json:"hello,omitempty"`
	Op    string `json:"op,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
}

type hello struct {
	Device    string `json:"device"`
	SoftBytes int64  `json:"softBytes"`
	HardBytes int64  `json:"hardBytes"`
	Cmd       string `json:"cmd"`
}

type response struct {
	Err    string `json:"err,omitempty"`
	Result string `json:"result,omitempty"`
	Route  string `json:"route,omitempty"`
	Why    string `json:"why,omitempty"`
}

func main() { os.Exit(run(os.Args[1:])) }

// envMiB reads NVIDIA's singular variable, or the first value of
// gpufrac's older per-GPU list (NAME + "S").
func envMiB(name string) int64 {
	v := os.Getenv(name)
	if v == "" {
		v, _, _ = strings.Cut(os.Getenv(name+"S"), ",")
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func run(args []string) (rc int) {
	fs := flag.NewFlagSet("fakecuda", flag.ContinueOnError)
	soft := fs.Int64("soft", envMiB("NVIDIA_GPU_MEMORY_REQUEST"), "soft limit (guaranteed) in MiB")
	hard := fs.Int64("hard", envMiB("NVIDIA_GPU_MEMORY_LIMIT"), "hard limit in MiB; 0 none")
	device := fs.String("device", os.Getenv("NVIDIA_VISIBLE_DEVICES"), "GPU UUID")
	name := fs.String("name", "fakecuda", "command name the daemon lists")
	linger := fs.Duration("linger", 0, "after a failed CUDA call, stay connected this long before exiting (a process that ignores the error)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	steps := fs.Args()
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
	call := func(req request) response {
		var resp response
		if err := enc.Encode(req); err != nil {
			return response{Err: err.Error()}
		}
		if err := dec.Decode(&resp); err != nil {
			return response{Err: "connection to the MPS server lost: " + err.Error()}
		}
		return resp
	}
	h := call(request{Kind: "client", Hello: &hello{Device: *device, SoftBytes: *soft << 20, HardBytes: *hard << 20, Cmd: *name}})
	if h.Err != "" {
		fmt.Printf("cuInit: %s\n", h.Err)
		return 2
	}
	fmt.Printf("cuInit: CUDA_SUCCESS: MPS client on %s\n", h.Route)
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
			r := call(request{Op: "alloc", Bytes: mib << 20})
			fmt.Printf("cuMemAlloc(%d MiB): %s%s\n", mib, r.Result, why(r))
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
				r := call(request{Op: "sync"})
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
			r := call(request{Op: "fault"})
			fmt.Printf("kernel %s: fatal GPU exception: %s%s\n", arg, r.Result, why(r))
			return exitFor(r)
		default:
			fmt.Printf("unknown step %q (alloc, hold, fault)\n", verb)
			return 1
		}
	}
	return 0
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

func why(r response) string {
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

func exitFor(r response) int {
	switch {
	case r.Err != "":
		return 2
	case r.Result == "CUDA_ERROR_MPS_CLIENT_TERMINATED":
		return 4
	case r.Result == "CUDA_ERROR_OUT_OF_MEMORY":
		return 3
	case r.Result != "CUDA_SUCCESS":
		return 1
	}
	return 0
}
