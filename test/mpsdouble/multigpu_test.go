// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The node server: one v3 server whose allowed_devices lists both GPUs
// (NVIDIA's configuration example, docs/design/nvidia/mps-multi-gpu.md M1).
const nodeServerTOML = `schema_version = "1.0"

[servers.gpufrac]
allowed_devices = "GPU-a,GPU-b"

[features.memacct]
enabled = true

[features.context-share]
enabled = true
default_socket = "off"
`

// A share of two GPUs under one server (issue 35 item 4): T, a client of
// both GPUs with a soft and hard limit on each, allocates on both; the
// ledger, the soft limits and eviction stay per GPU. Pressure on GPU-b,
// where T is within its soft limit, evicts O (over its soft limit there)
// and not T, although T is further above its soft limit on GPU-a; pressure
// on GPU-a then evicts T, which loses both GPUs (the server ends the
// client process) and frees its memory on GPU-b too. The multi-device
// client and its whole-process termination are inferred
// (test/gpu/run.sh multigpu_check checks both on two GPUs); the per-server
// eviction is NVIDIA's (M4).
func TestTwoGPUShareUnderOneServer(t *testing.T) {
	w := startWorld(t, "GPU-a=81920,GPU-b=81920", nodeServerTOML)
	// Soft limits per GPU sum to at most its memory, as the scheduler keeps
	// them: GPU-a T 20 + M 60; GPU-b T 20 + O 20 + N 40 (GiB).
	tc, tOut := w.client(w.pipe, "-device", "GPU-a,GPU-b", "-soft", "20480,20480", "-hard", "71680,40960",
		"alloc", "61440", "on", "GPU-b", "alloc", "10240", "hold", "0")
	waitFor(t, tOut, "cuMemAlloc(10240 MiB on GPU-b): CUDA_SUCCESS")
	if !strings.Contains(tOut.String(), "cuMemAlloc(61440 MiB): CUDA_SUCCESS") {
		t.Fatalf("T's 60Gi on its first GPU:\n%s", tOut)
	}
	o, oOut := w.client(w.pipe, "-device", "GPU-b", "-soft", "20480", "-hard", "61440", "alloc", "40960", "hold", "0")
	waitFor(t, oOut, "cuMemAlloc(40960 MiB): CUDA_SUCCESS")
	rows := w.ctlOut("client", "list", "--format=csv,noheader")
	tPid := strconv.Itoa(tc.Process.Pid)
	if !regexp.MustCompile(`(?m)^`+tPid+`,[^,]+,0,`).MatchString(rows) || !regexp.MustCompile(`(?m)^`+tPid+`,[^,]+,1,`).MatchString(rows) {
		t.Errorf("client list does not show T (pid %s) on both devices:\n%s", tPid, rows)
	}

	n, nOut := w.client(w.pipe, "-device", "GPU-b", "-soft", "40960", "-hard", "40960", "alloc", "40960", "hold", "0")
	waitFor(t, nOut, "cuMemAlloc(40960 MiB): CUDA_SUCCESS")
	if code := exitWithin(o, 10*time.Second); code != 4 {
		t.Errorf("O, over its soft limit on GPU-b, exited %d, want 4 (evicted):\n%s", code, oOut)
	}
	if strings.Contains(tOut.String(), "TERMINATED") {
		t.Fatalf("T, within its soft limit on GPU-b, was evicted for pressure there:\n%s", tOut)
	}

	m, mOut := w.client(w.pipe, "-device", "GPU-a", "-soft", "61440", "-hard", "61440", "alloc", "61440", "hold", "0")
	waitFor(t, mOut, "cuMemAlloc(61440 MiB): CUDA_SUCCESS")
	if code := exitWithin(tc, 10*time.Second); code != 4 || !strings.Contains(tOut.String(), "evicted: it used 40960MiB above its soft limit of 20480MiB on GPU-a") {
		t.Errorf("T exited %d, want 4 (evicted on GPU-a):\n%s", code, tOut)
	}
	// T's 10Gi on GPU-b went with it: Q's 40Gi fits beside N's without an
	// eviction.
	q, qOut := w.client(w.pipe, "-device", "GPU-b", "-soft", "40960", "-hard", "40960", "alloc", "40960")
	if code := exitWithin(q, 10*time.Second); code != 0 {
		t.Errorf("Q on GPU-b after T's termination exited %d:\n%s", code, qOut)
	}

	log, _ := os.ReadFile(filepath.Join(w.log, "control.log"))
	for _, want := range []string{
		"config: servers=gpufrac devices=GPU-a,GPU-b",
		"memacct: evicted client pid=" + strconv.Itoa(o.Process.Pid) + " ",
		"device=GPU-b for pid " + strconv.Itoa(n.Process.Pid) + " ",
		"memacct: evicted client pid=" + tPid + " ",
		"device=GPU-a for pid " + strconv.Itoa(m.Process.Pid) + " ",
		"memacct: device GPU-b eviction requested=1 performed=1 no-victim=0",
		"memacct: device GPU-a eviction requested=1 performed=1 no-victim=0",
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("control.log lacks %q:\n%s", want, log)
		}
	}
	if !regexp.MustCompile(`client terminated: pid=` + tPid + ` cgroup=\S+ device=GPU-b route=\S+: evicted:`).Match(log) {
		t.Errorf("control.log does not end T on GPU-b with its eviction:\n%s", log)
	}
	for _, c := range []*exec.Cmd{n, m} {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}

// A server lists only the GPUs of its allowed_devices: a client asking for
// another GPU is refused (NVIDIA's Dynamo guide: no CUDA-capable device),
// and a client of a one-GPU server cannot reach a second GPU through it.
func TestAClientReachesOnlyItsServersGPUs(t *testing.T) {
	w := startWorld(t, "GPU-a=81920,GPU-b=81920", gpufracTOML)
	c, out := w.client(filepath.Join(w.pipe, "gpufrac"), "-device", "GPU-a,GPU-b", "-soft", "1024", "-hard", "2048", "alloc", "1024")
	if code := exitCode(c.Wait()); code != 2 || !strings.Contains(out.String(), `server gpufrac does not serve device "GPU-b"`) {
		t.Errorf("a two-GPU client of a one-GPU server exited %d:\n%s", code, out)
	}
}

// exitWithin is the client's exit code, or -2 when it is still running
// after d (it is then killed): a client that should have been evicted but
// holds its memory must fail the test, not hang it.
func exitWithin(c *exec.Cmd, d time.Duration) int {
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return exitCode(err)
	case <-time.After(d):
		_ = c.Process.Kill()
		<-done //nolint:errcheck // killed: its exit status says nothing about the double
		return -2
	}
}
