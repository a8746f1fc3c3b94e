// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/test/gpuwire"
)

// NVIDIA's "Memory Protection and Error Containment" (Volta MPS): a fatal
// GPU exception raised by one client reaches every client sharing that
// GPU, and clients of other GPUs go on. The double terminates them and
// logs the fault before the terminations it caused, each line naming the
// client's pid, cgroup and device (the lines internal/node/mps reads for the
// MPSClientTerminated incident; their format is the double's).
func TestFatalFaultEndsTheGPUsClients(t *testing.T) {
	w := startWorld(t, "GPU-a=81920,GPU-b=81920", strings.Replace(gpufracTOML, `"GPU-a"`, `"GPU-a,GPU-b"`, 1))
	a, aOut := w.client(w.pipe, "-device", "GPU-a", "alloc", "1024", "hold", "0")
	waitFor(t, aOut, "CUDA_SUCCESS\n")
	other, otherOut := w.client(w.pipe, "-device", "GPU-b", "alloc", "1024", "hold", "0")
	waitFor(t, otherOut, "CUDA_SUCCESS\n")
	f, fOut := w.client(w.pipe, "-device", "GPU-a", "fault", "illegal-address")
	if code := exitCode(f.Wait()); code != 4 || !strings.Contains(fOut.String(), "kernel illegal-address: fatal GPU exception: CUDA_ERROR_MPS_CLIENT_TERMINATED") {
		t.Errorf("the faulting client exited %d:\n%s", code, fOut)
	}
	if code := exitCode(a.Wait()); code != 4 || !strings.Contains(aOut.String(), "fatal GPU exception raised by pid "+strconv.Itoa(f.Process.Pid)) {
		t.Errorf("A, on the faulting GPU, exited %d:\n%s", code, aOut)
	}
	if strings.Contains(otherOut.String(), "TERMINATED") {
		t.Errorf("a client of another GPU was terminated:\n%s", otherOut)
	}
	raw, _ := os.ReadFile(filepath.Join(w.log, "control.log"))
	log := string(raw)
	fault := strings.Index(log, "server: fatal GPU exception on device=GPU-a raised by pid="+strconv.Itoa(f.Process.Pid)+" cgroup=")
	term := strings.Index(log, "client terminated: pid="+strconv.Itoa(a.Process.Pid)+" cgroup=")
	if fault < 0 || term < fault || !strings.Contains(log[term:], "device=GPU-a route=uid_") {
		t.Errorf("control.log lacks the fault before A's termination:\n%s", log)
	}
	_ = other.Process.Kill()
	_ = other.Wait()
}

// After a fatal exception the server takes no new client on the GPU until
// every client the exception reached has exited (NVIDIA's error
// containment): a client that lingers wedges the GPU for newcomers, who get
// CUDA_ERROR_MPS_SERVER_NOT_READY, and the log names the lingering client
// (the line internal/node/mps reads for the MPSClientWedged incident).
func TestLingeringClientWedgesTheGPU(t *testing.T) {
	w := startWorld(t, "GPU-a=81920", gpufracTOML)
	// A client that ignores the exception: this test process, connected
	// and silent.
	conn, err := net.Dial("unix", filepath.Join(w.pipe, "control"))
	if err != nil {
		t.Fatal(err)
	}
	enc, dec := json.NewEncoder(conn), json.NewDecoder(conn)
	var hi gpuwire.Response
	if err := enc.Encode(gpuwire.Request{Kind: "client", Hello: &gpuwire.Hello{Device: "GPU-a", Cmd: "stuck"}}); err != nil || dec.Decode(&hi) != nil || hi.Result != gpuwire.CUDASuccess {
		t.Fatalf("connecting the lingering client: %v %+v", err, hi)
	}
	f, fOut := w.client(w.pipe, "-device", "GPU-a", "fault", "illegal-address")
	if code := exitCode(f.Wait()); code != 4 {
		t.Fatalf("the faulting client exited %d:\n%s", code, fOut)
	}
	n, nOut := w.client(w.pipe, "-device", "GPU-a", "alloc", "1024")
	if code := exitCode(n.Wait()); code != 2 || !strings.Contains(nOut.String(), gpuwire.CUDAServerNotReady) {
		t.Errorf("a new client while one lingers exited %d, want 2 (%s):\n%s", code, gpuwire.CUDAServerNotReady, nOut)
	}
	raw, _ := os.ReadFile(filepath.Join(w.log, "control.log"))
	want := "client refused: pid=" + strconv.Itoa(n.Process.Pid) + " cgroup="
	if i := strings.Index(string(raw), want); i < 0 || !strings.Contains(string(raw)[i:], "device=GPU-a: server not ready: waiting for the clients a fatal GPU exception ended to exit: pid="+strconv.Itoa(os.Getpid())+" cgroup=") {
		t.Errorf("control.log lacks the refusal naming the lingering client:\n%s", raw)
	}
	_ = conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		again, out := w.client(w.pipe, "-device", "GPU-a", "alloc", "1024")
		if exitCode(again.Wait()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the GPU never took clients again after the lingering one exited:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
