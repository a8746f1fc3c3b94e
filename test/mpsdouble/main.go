// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command mpsdouble stands in for NVIDIA's MPS tools on machines without a
// GPU: installed as nvidia-cuda-mps-control it is the control daemon (-d,
// -f) and its command-line client, accepting NVIDIA's documented MPS v3
// grammar and nothing else (grammar.go) and the legacy stdin commands;
// installed as nvidia-smi it accepts the compute-mode change a legacy
// daemon makes. The daemon listens on CUDA_MPS_PIPE_DIRECTORY/control, on
// <server>/control and <server>/<namespace>/control for each server and
// namespace, and routes a client by the socket it connects to; CUDA
// clients (test/fakecuda), of one GPU or of several GPUs of their server,
// allocate against its per-GPU memory ledger, and
// memacct eviction works as NVIDIA documents it (clients.go). Every start,
// command and eviction goes to CUDA_MPS_LOG_DIRECTORY/control.log, so tests
// pin the exact command sequence. `client list` prints NVIDIA's documented
// row; MPSDOUBLE_CLIENT_LIST=observed-615 makes it print the row KAI's
// operator read from an r615 driver instead (v3.go, clientList). The wire
// protocol between the double's pieces is its own: the real one is private
// to NVIDIA.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/test/gpuwire"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "nvidia-smi":
		os.Exit(smi(os.Args[1:]))
	default:
		os.Exit(control(os.Args[1:]))
	}
}

func logLine(format string, args ...any) {
	dir := os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if dir == "" {
		dir = "/var/log/nvidia-mps"
	}
	f, err := os.OpenFile(filepath.Join(dir, "control.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpsdouble:", err)
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(f, "[%s] %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func smi(args []string) int {
	logLine("nvidia-smi %s", strings.Join(args, " "))
	return 0
}

// pipeDir is CUDA_MPS_PIPE_DIRECTORY or NVIDIA's default (v3 interface
// page: /run/nvidia-mps for root, else /tmp/nvidia-mps).
func pipeDir() string {
	if dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); dir != "" {
		return dir
	}
	if os.Geteuid() == 0 {
		return "/run/nvidia-mps"
	}
	return "/tmp/nvidia-mps"
}

func control(args []string) int {
	inv, err := Parse(args)
	if err != nil {
		// NVIDIA documents no messages or exit codes: plausible ones.
		fmt.Println("mpsdouble: " + err.Error())
		return 1
	}
	switch {
	case inv.Help:
		fmt.Println("usage: nvidia-cuda-mps-control [-d|-f] [-m] [-p 2|3] [-a config.toml] | -q | <module> <verb> [args] [--key=value ...]")
		return 0
	case inv.Version:
		fmt.Println("mpsdouble (stands in for nvidia-cuda-mps-control, MPS v3 r615)")
		return 0
	case inv.Daemon || inv.Foreground:
		return daemon(inv)
	case inv.Quit:
		return oneShot(gpuwire.Request{Kind: "quit"})
	case inv.Module != "":
		return oneShot(gpuwire.Request{Kind: "cli", Args: args})
	}
	// Legacy interactive use: one command per stdin line, as
	// `echo cmd | nvidia-cuda-mps-control`.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd := strings.TrimSpace(sc.Text())
		if cmd == "" {
			continue
		}
		if rc := oneShot(gpuwire.Request{Kind: "legacy", Cmd: cmd}); rc != 0 {
			return rc
		}
	}
	return 0
}

func oneShot(req gpuwire.Request) int {
	resp, err := call(req)
	if err != nil {
		fmt.Println("Cannot find MPS control daemon process")
		return 1
	}
	if resp.Out != "" {
		fmt.Println(resp.Out)
	}
	if resp.Err != "" {
		// KAI's code: the CLI reports its diagnostics on stdout and exits
		// non-zero.
		fmt.Println(resp.Err)
		return 1
	}
	return 0
}

func call(req gpuwire.Request) (*gpuwire.Response, error) {
	conn, err := dialUnix(filepath.Join(pipeDir(), "control"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, err
	}
	var resp gpuwire.Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// dialUnix connects to path, through the directory's /proc/self/fd name
// when the path is too long for a unix socket address (see listenUnix).
func dialUnix(path string) (net.Conn, error) {
	if len(path) < 100 {
		return net.DialTimeout("unix", path, time.Second)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer func() { _ = dir.Close() }()
	return net.DialTimeout("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)), time.Second)
}

// daemonProc is the running daemon: its state under one lock, and its
// listeners by directory.
type daemonProc struct {
	mu        sync.Mutex
	v3        *v3State
	protocol  int
	pinned    map[string]string // legacy: per device
	listeners map[string]net.Listener
	quit      chan struct{}
	quitOnce  sync.Once
}

func daemon(inv *Invocation) int {
	mode := "-f"
	if inv.Daemon {
		// The real -d forks into the background; the double stays in the
		// foreground, which is all a container or test needs.
		mode = "-d (foreground in the double)"
	}
	if inv.Protocol == 3 {
		mode += " -p 3"
	}
	if inv.Multiuser {
		mode += " -m"
	}
	if inv.Apply != "" {
		mode += " -a " + inv.Apply
	}
	d := &daemonProc{protocol: inv.Protocol, pinned: map[string]string{}, listeners: map[string]net.Listener{}, quit: make(chan struct{})}
	fail := func(err error) int {
		logLine("start failed: %v", err)
		fmt.Fprintln(os.Stderr, "mpsdouble:", err)
		d.closeAll()
		return 1
	}
	pipe := pipeDir()
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		return fail(err)
	}
	if inv.Protocol == 3 {
		led, err := gpuLedger()
		if err != nil {
			return fail(err)
		}
		d.v3 = newV3State(pipe)
		d.v3.ledger = led
		switch shape := os.Getenv("MPSDOUBLE_CLIENT_LIST"); shape {
		case "", "documented":
		case clientListObserved615:
			d.v3.clientListShape = shape
		default:
			return fail(fmt.Errorf("MPSDOUBLE_CLIENT_LIST=%q: want documented or %s", shape, clientListObserved615))
		}
		d.v3.listen = func(dir string) error {
			rel, _ := filepath.Rel(pipe, dir)
			parts := strings.Split(rel, string(filepath.Separator))
			rt := route{server: parts[0], namespace: "default"}
			if len(parts) > 1 {
				rt.namespace = parts[1]
			}
			return d.listen(dir, rt)
		}
		d.v3.stop = d.unlisten
		if inv.Apply != "" {
			if err := d.v3.load(inv.Apply); err != nil {
				return fail(err)
			}
		}
	}
	// The main socket comes last: a command never finds a half-configured
	// daemon.
	if err := d.listen(pipe, route{}); err != nil {
		return fail(err)
	}
	logLine("start %s gpu=%s", mode, os.Getenv("CUDA_VISIBLE_DEVICES"))
	if inv.Foreground && inv.Protocol == 3 {
		// KAI's supervisor (NVIDIA-authored): in -f the v3 daemon reads
		// stdin, and end of input stops it. Inferred for the real daemon.
		go func() {
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) == "quit" {
					break
				}
			}
			logLine("stdin closed or quit: stopping")
			d.stop()
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		logLine("signal")
	case <-d.quit:
	}
	d.closeAll()
	logLine("exit")
	return 0
}

// gpuLedger reads the GPUs' memory: MPSDOUBLE_GPUS ("GPU-a=MiB,..."),
// the daemon template's GPUFRAC_GPUS_MEMORY_MIB (same form, every GPU of a
// node server) or CUDA_VISIBLE_DEVICES with GPUFRAC_GPU_MEMORY_MIB.
func gpuLedger() (*ledger, error) {
	spec := os.Getenv("MPSDOUBLE_GPUS")
	if spec == "" {
		spec = os.Getenv("GPUFRAC_GPUS_MEMORY_MIB")
	}
	if spec == "" {
		uuid, mib := os.Getenv("CUDA_VISIBLE_DEVICES"), os.Getenv("GPUFRAC_GPU_MEMORY_MIB")
		if uuid == "" || mib == "" {
			return nil, errors.New("the MPS double needs the GPUs' memory: MPSDOUBLE_GPUS, or CUDA_VISIBLE_DEVICES and GPUFRAC_GPU_MEMORY_MIB")
		}
		spec = uuid + "=" + mib
	}
	return parseLedger(spec)
}

func (d *daemonProc) stop() { d.quitOnce.Do(func() { close(d.quit) }) }

func (d *daemonProc) listen(dir string, rt route) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "control")
	_ = os.Remove(path)
	lis, err := listenUnix(path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	d.listeners[dir] = lis
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go d.serve(conn.(*net.UnixConn), rt)
		}
	}()
	return nil
}

// listenUnix binds a socket at path. Test harnesses keep their node
// directories under long temporary paths, beyond the 108 bytes of a unix
// socket address; such a path is bound through a short /proc/self/fd name
// of its directory. Production layouts stay under the limit
// (mpslayout.TestFitsSocketPaths).
func listenUnix(path string) (net.Listener, error) {
	if len(path) < 100 {
		return net.Listen("unix", path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer func() { _ = dir.Close() }()
	return net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}

func (d *daemonProc) unlisten(dir string) {
	if lis := d.listeners[dir]; lis != nil {
		_ = lis.Close()
		delete(d.listeners, dir)
		_ = os.RemoveAll(dir)
	}
}

func (d *daemonProc) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for dir, lis := range d.listeners {
		_ = lis.Close()
		_ = os.Remove(filepath.Join(dir, "control"))
	}
}

func peer(conn *net.UnixConn) (pid, uid int) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, 0
	}
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid, uid = int(cred.Pid), int(cred.Uid)
		}
	})
	return pid, uid
}

func (d *daemonProc) serve(conn *net.UnixConn, rt route) {
	defer func() { _ = conn.Close() }()
	dec, enc := json.NewDecoder(conn), json.NewEncoder(conn)
	var req gpuwire.Request
	if err := dec.Decode(&req); err != nil {
		return
	}
	if req.Kind == "client" {
		d.serveClient(conn, dec, enc, rt, req)
		return
	}
	if rt != (route{}) {
		_ = enc.Encode(gpuwire.Response{Err: "the control commands are served on the main control socket only"})
		return
	}
	d.mu.Lock()
	resp := d.command(req)
	d.mu.Unlock()
	_ = enc.Encode(resp)
}

func (d *daemonProc) command(req gpuwire.Request) gpuwire.Response {
	switch req.Kind {
	case "quit":
		logLine("command: quit")
		d.stop()
		return gpuwire.Response{}
	case "legacy":
		logLine("command: %s", req.Cmd)
		return d.legacy(req.Cmd)
	case "cli":
		logLine("command: %s", strings.Join(req.Args, " "))
		inv, err := Parse(req.Args)
		if err != nil {
			return gpuwire.Response{Err: err.Error()}
		}
		if d.v3 == nil {
			return gpuwire.Response{Err: "the control daemon runs MPS protocol 2; module commands need a daemon started with -p 3"}
		}
		r := d.v3.handle(inv)
		if r.err != nil {
			logLine("command failed: %v", r.err)
			return gpuwire.Response{Out: r.out, Err: r.err.Error()}
		}
		return gpuwire.Response{Out: r.out}
	}
	return gpuwire.Response{Err: "unknown request " + req.Kind}
}

func (d *daemonProc) legacy(line string) gpuwire.Response {
	if d.v3 != nil {
		return gpuwire.Response{Err: "the control daemon runs MPS protocol 3; legacy commands are not accepted"}
	}
	cmd, err := parseLegacy(line)
	if err != nil {
		return gpuwire.Response{Err: err.Error()}
	}
	switch cmd.name {
	case "get_default_active_thread_percentage":
		return gpuwire.Response{Out: "100.0"}
	case "get_default_device_pinned_mem_limit":
		return gpuwire.Response{Out: d.pinned[cmd.args[0]]}
	case "set_default_device_pinned_mem_limit":
		d.pinned[cmd.args[0]] = cmd.args[1]
	case "quit":
		d.stop()
	}
	return gpuwire.Response{}
}

// serveClient is one CUDA client's connection: hello, then allocations
// until it hangs up (the process exits).
func (d *daemonProc) serveClient(conn *net.UnixConn, dec *json.Decoder, enc *json.Encoder, rt route, req gpuwire.Request) {
	if d.v3 == nil || req.Hello == nil {
		_ = enc.Encode(gpuwire.Response{Err: "the double models CUDA clients of MPS v3 daemons only"})
		return
	}
	pid, uid := peer(conn)
	d.mu.Lock()
	cs, err := d.v3.connect(pid, uid, rt, *req.Hello)
	d.mu.Unlock()
	if err != nil {
		_ = enc.Encode(gpuwire.Response{Err: err.Error()})
		return
	}
	defer func() {
		d.mu.Lock()
		d.v3.disconnect(cs)
		d.mu.Unlock()
	}()
	ctx := map[bool]string{true: "own context", false: "shared context"}[cs[0].context == contextOwnPerProc]
	if err := enc.Encode(gpuwire.Response{Result: gpuwire.CUDASuccess, Route: cs[0].server + "/" + cs[0].namespace + " (" + ctx + ")"}); err != nil {
		return
	}
	for {
		var op gpuwire.Request
		if err := dec.Decode(&op); err != nil {
			return
		}
		c := onDevice(cs, op.Device)
		if c == nil {
			if err := enc.Encode(gpuwire.Response{Result: gpuwire.CUDAInvalidDevice, Why: "not a device of this client: " + op.Device}); err != nil {
				return
			}
			continue
		}
		d.mu.Lock()
		var res string
		switch op.Op {
		case "alloc":
			res = d.v3.alloc(c, op.Bytes)
		case "free":
			res = d.v3.free(c, op.Bytes)
		case "fault":
			res = d.v3.fault(c)
		case "sync":
			res = gpuwire.CUDASuccess
			if c.terminated != "" {
				res = gpuwire.CUDATerminated
			}
		default:
			res = gpuwire.CUDAInvalidValue
		}
		why := c.whyTerm
		d.mu.Unlock()
		if err := enc.Encode(gpuwire.Response{Result: res, Why: why}); err != nil {
			return
		}
	}
}

// onDevice is the record of a client's use of device (its first when
// device is empty), or nil when the client does not use it.
func onDevice(cs []*client, device string) *client {
	if device == "" {
		return cs[0]
	}
	for _, c := range cs {
		if c.device == device {
			return c
		}
	}
	return nil
}
