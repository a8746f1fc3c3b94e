package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// NVIDIA's "Memory Protection and Error Containment" (Volta MPS): a fatal
// GPU exception raised by one client reaches every client sharing that
// GPU, and clients of other GPUs go on. The double terminates them and
// logs the fault before the terminations it caused, each line naming the
// client's pid, cgroup and device (the lines pkg/mps reads for the
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
