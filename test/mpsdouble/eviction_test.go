// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// world is a running double (-f -p 3 -m -a) with the fake CUDA client.
type world struct {
	t                   *testing.T
	bin, pipe, log, cfg string
	env                 []string
}

func startWorld(t *testing.T, gpus, toml string) *world {
	t.Helper()
	bin := t.TempDir()
	for pkg, out := range map[string]string{".": "nvidia-cuda-mps-control", "../fakecuda": "fakecuda"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, out), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	dir := t.TempDir()
	w := &world{t: t, bin: bin, pipe: filepath.Join(dir, "pipe"), log: filepath.Join(dir, "log"), cfg: filepath.Join(dir, "mps.toml")}
	for _, d := range []string{w.pipe, w.log} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(w.cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	w.env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+w.pipe, "CUDA_MPS_LOG_DIRECTORY="+w.log, "MPSDOUBLE_GPUS="+gpus)
	d := exec.Command(filepath.Join(bin, "nvidia-cuda-mps-control"), "-f", "-p", "3", "-m", "-a", w.cfg)
	d.Env = w.env
	stdin, err := d.StdinPipe() // held open: EOF stops a -f daemon
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = d.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for w.ctl("server", "list") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the double never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return w
}

func (w *world) ctl(args ...string) error {
	cmd := exec.Command(filepath.Join(w.bin, "nvidia-cuda-mps-control"), append([]string{"-p", "3"}, args...)...)
	cmd.Env = w.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}

// client starts fakecuda with the pipe directory dir.
// syncBuffer is the client's output, read while the client writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (w *world) client(dir string, args ...string) (*exec.Cmd, *syncBuffer) {
	cmd := exec.Command(filepath.Join(w.bin, "fakecuda"), args...)
	cmd.Env = append(slices.Clone(w.env), "CUDA_MPS_PIPE_DIRECTORY="+dir)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	// A test that fails early leaves no held client behind (a client that
	// already exited makes both calls return errors, ignored).
	w.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

const gpufracTOML = `schema_version = "1.0"

[servers.gpufrac]
allowed_devices = "GPU-a"

[features.memacct]
enabled = true

[features.context-share]
enabled = true
default_socket = "off"
`

// NVIDIA's memory-partitioning page, "MPS Pressure Handling and Eviction":
// A (soft 40Gi, hard 100Gi) borrows to 90Gi of a 141Gi GPU; B (60/60),
// within its soft limit, cannot fit its 60Gi, so the server terminates A,
// the over-soft client, and B's allocation succeeds; A's next call returns
// CUDA_ERROR_MPS_CLIENT_TERMINATED.
func TestEvictionUpholdsTheSoftLimit(t *testing.T) {
	w := startWorld(t, "GPU-a=144384", gpufracTOML)
	a, aOut := w.client(w.pipe, "-soft", "40960", "-hard", "102400", "-device", "GPU-a", "alloc", "92160", "hold", "0")
	waitFor(t, aOut, "cuMemAlloc(92160 MiB): CUDA_SUCCESS")
	b, bOut := w.client(w.pipe, "-soft", "61440", "-hard", "61440", "-device", "GPU-a", "alloc", "61440")
	if err := b.Wait(); err != nil {
		t.Fatalf("B within its soft limit failed: %v\n%s", err, bOut)
	}
	if !strings.Contains(bOut.String(), "cuMemAlloc(61440 MiB): CUDA_SUCCESS") {
		t.Errorf("B: %s", bOut)
	}
	if code := exitCode(a.Wait()); code != 4 || !strings.Contains(aOut.String(), "CUDA_ERROR_MPS_CLIENT_TERMINATED (evicted: it used 51200MiB above its soft limit of 40960MiB") {
		t.Errorf("A exited %d, want 4 (terminated) with the reason:\n%s", code, aOut)
	}
	log, _ := os.ReadFile(filepath.Join(w.log, "control.log"))
	if !strings.Contains(string(log), "memacct: device GPU-a eviction requested=1 performed=1 no-victim=0") {
		t.Errorf("control.log lacks the eviction counters:\n%s", log)
	}
}

// The server never evicts for a requester above its own soft limit, nor
// evicts a client within its soft limit: both get out-of-memory.
func TestNoEvictionForOverSoftRequesterOrWithinSoftVictim(t *testing.T) {
	w := startWorld(t, "GPU-a=102400", gpufracTOML)
	a, aOut := w.client(w.pipe, "-soft", "40960", "-hard", "102400", "-device", "GPU-a", "alloc", "61440", "hold", "0")
	waitFor(t, aOut, "CUDA_SUCCESS")
	// B borrows: it asks for more than its soft limit; A is not evicted.
	b, bOut := w.client(w.pipe, "-soft", "10240", "-hard", "51200", "-device", "GPU-a", "alloc", "51200")
	if code := exitCode(b.Wait()); code != 3 {
		t.Errorf("over-soft B exited %d, want 3 (out of memory):\n%s", code, bOut)
	}
	// C within its soft limit: only A is over soft, so A goes.
	c, cOut := w.client(w.pipe, "-soft", "61440", "-hard", "61440", "-device", "GPU-a", "alloc", "61440", "hold", "0")
	waitFor(t, cOut, "cuMemAlloc(61440 MiB): CUDA_SUCCESS")
	if code := exitCode(a.Wait()); code != 4 {
		t.Errorf("A exited %d, want 4:\n%s", code, aOut)
	}
	// D within its soft limit, but nobody is over soft any more: out of
	// memory, and C, within its own soft limit, stays.
	d, dOut := w.client(w.pipe, "-soft", "61440", "-hard", "61440", "-device", "GPU-a", "alloc", "61440")
	if code := exitCode(d.Wait()); code != 3 {
		t.Errorf("D exited %d, want 3:\n%s", code, dOut)
	}
	log, _ := os.ReadFile(filepath.Join(w.log, "control.log"))
	if !strings.Contains(string(log), "eviction requested by pid "+strconv.Itoa(d.Process.Pid)+": no client above its soft limit") {
		t.Errorf("control.log lacks D's eviction request without a victim:\n%s", log)
	}
	if strings.Contains(cOut.String(), "TERMINATED") {
		t.Errorf("C, within its soft limit, was evicted:\n%s", cOut)
	}
	_ = c.Process.Kill()
	_ = c.Wait()
}

// Routing by socket: a namespace's clients are held to its pinned limit;
// the server's own socket lands in its default namespace, which carries
// the safety limit; a namespace with clients is deleted only with --force,
// which terminates them.
func TestNamespaceRoutingAndForceDelete(t *testing.T) {
	w := startWorld(t, "GPU-a=81920", gpufracTOML)
	for _, args := range [][]string{
		{"server", "set", "gpufrac", "--pinned-memory-limit=64M", "--active-thread-percentage=1"},
		{"namespace", "create", "c_a", "--server=gpufrac"},
		{"namespace", "set", "c_a", "--server=gpufrac", "--pinned-memory-limit=8G", "--active-thread-percentage=50"},
	} {
		if err := w.ctl(args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	over, overOut := w.client(filepath.Join(w.pipe, "gpufrac", "c_a"), "-device", "GPU-a", "alloc", "9216")
	if code := exitCode(over.Wait()); code != 3 || !strings.Contains(overOut.String(), "gpufrac/c_a (shared context)") {
		t.Errorf("9Gi in an 8G namespace exited %d:\n%s", code, overOut)
	}
	mis, misOut := w.client(filepath.Join(w.pipe, "gpufrac"), "-device", "GPU-a", "alloc", "128")
	if code := exitCode(mis.Wait()); code != 3 || !strings.Contains(misOut.String(), "gpufrac/default") {
		t.Errorf("a client on the server socket got past the default namespace's 64M (exit %d):\n%s", code, misOut)
	}
	ts, tsOut := w.client(w.pipe, "-device", "GPU-a", "alloc", "1024", "hold", "0")
	waitFor(t, tsOut, "own context")
	in, inOut := w.client(filepath.Join(w.pipe, "gpufrac", "c_a"), "-device", "GPU-a", "alloc", "1024", "hold", "0")
	waitFor(t, inOut, "CUDA_SUCCESS\n")
	if err := w.ctl("namespace", "delete", "c_a", "--server=gpufrac"); err == nil || !strings.Contains(err.Error(), "active clients") {
		t.Errorf("namespace delete with a client attached: %v", err)
	}
	if err := w.ctl("namespace", "delete", "c_a", "--server=gpufrac", "--force"); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(in.Wait()); code != 4 {
		t.Errorf("the deleted namespace's client exited %d, want 4:\n%s", code, inOut)
	}
	_ = ts.Process.Kill()
	_ = ts.Wait()
}

func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("never printed %q:\n%s", want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
