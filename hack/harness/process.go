// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// process is one child the harness started. Its output goes to a log file;
// it is stopped by its own PID only.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File

	done    chan struct{}
	waitErr error

	mu       sync.Mutex
	stopping bool
	peakRSS  uint64 // bytes, VmHWM sampled before the stop signal
}

// startProcess runs bin with args, its working directory dir, output in
// dir/<name>.log. The child gets its own process group (a Ctrl-C in the
// demo's terminal reaches the harness, which stops children in order) and
// SIGKILL when the harness dies, so a crashed test leaves no servers behind.
func startProcess(name, dir, bin string, args []string, env []string) (*process, error) {
	return startProcessVia(spawn, name, dir, bin, args, env)
}

// startProcessVia is startProcess with the function that forks the child
// (the real node's children are forked inside its mount namespace).
func startProcessVia(start func(*exec.Cmd) error, name, dir, bin string, args []string, env []string) (*process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	_, _ = fmt.Fprintf(logFile, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := start(cmd); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// The kernel sends Pdeathsig when the thread that forked the child exits,
// not the process. Go may retire threads, so all children are forked from
// one goroutine locked to a thread that lives as long as the harness.
var (
	spawnOnce sync.Once
	spawnReq  chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReq = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not be reused or retired
			for req := range spawnReq {
				req.done <- req.cmd.Start()
			}
		}()
	})
	req := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawnReq <- req
	return <-req.done
}

// exited reports whether the process is gone, and why.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, fmt.Errorf("%s exited", p.name)
		}
		return true, fmt.Errorf("%s exited: %w", p.name, p.waitErr)
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process (by PID, never its group or a name),
// waits up to grace, then SIGKILLs it.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.stopping = true
	p.mu.Unlock()
	if gone, _ := p.exited(); gone {
		return nil
	}
	p.samplePeak()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.name, p.cmd.Process.Pid, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survives SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// samplePeak records the process's peak resident memory so far.
func (p *process) samplePeak() {
	hwm, err := readHWM(p.cmd.Process.Pid)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peakRSS = max(p.peakRSS, hwm)
}

func (p *process) peak() uint64 {
	p.samplePeak()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peakRSS
}

// readHWM reads VmHWM (peak resident set size) of a PID from /proc.
func readHWM(pid int) (uint64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "VmHWM:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmHWM of %d: %w", pid, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer func() { _ = f.Close() }()
	const window = 256 * 1024
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// runDirPrefix names the harness's temporary directories, followed by the
// owner's PID, so that a later run can tell leftovers of a killed run.
const runDirPrefix = "gpufrac-harness-"

// sweepStale removes the temporary directories of harness runs whose process
// is gone (a test binary killed by its timeout or a panic: its children died
// with it through Pdeathsig, its files did not).
func sweepStale(logger klog.Logger) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), runDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		if err := os.RemoveAll(path); err == nil {
			logger.V(2).Info("Removed the files of a harness run that did not clean up", "path", path, "pid", pid)
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
