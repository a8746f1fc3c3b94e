// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// nodeNS is a private mount namespace held by one locked OS thread. The real
// node's processes are forked from that thread, so they live in the
// namespace: there /run and /var/lib are fresh tmpfs, /var/log is a folder of
// the test, and the /proc/sys entries the kubelet writes are files of the
// test, so the node changes nothing on the host. The namespace goes away
// with the thread once its last process has exited.
type nodeNS struct {
	reqs chan func()
	done chan struct{}
}

// sysctlsKubeletSets are the kernel settings the kubelet writes at start
// (container manager's kernel tunables); each gets a file of ours over it.
var sysctlsKubeletSets = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// newNodeNS creates the namespace and its mounts; stateDir (on the host's
// file system) keeps /var/log and the sysctl files.
func newNodeNS(stateDir string) (*nodeNS, error) {
	ns := &nodeNS{reqs: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(ns.done)
		// Never unlocked: when this goroutine returns the thread exits,
		// and the namespace with it (the children were forked from it and
		// get Pdeathsig then, as with the harness's spawn thread).
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			ready <- fmt.Errorf("creating a private mount namespace (unshare CLONE_NEWNS): %w", err)
			return
		}
		if err := setupNodeMounts(stateDir); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for f := range ns.reqs {
			f()
		}
	}()
	if err := <-ready; err != nil {
		<-ns.done
		return nil, err
	}
	return ns, nil
}

func setupNodeMounts(stateDir string) error {
	// Nothing mounted here may reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private in the node's mount namespace: %w", err)
	}
	for _, dir := range []string{"/run", "/var/lib"} {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=755"); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s in the node's namespace: %w", dir, err)
		}
	}
	logDir := filepath.Join(stateDir, "var-log")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(logDir, "/var/log", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on /var/log: %w", logDir, err)
	}
	sysDir := filepath.Join(stateDir, "sysctl")
	for _, key := range append(slices.Clone(sysctlsKubeletSets), podNetworkSysctls...) {
		target := filepath.Join("/proc/sys", key)
		value, err := os.ReadFile(target)
		if err != nil {
			continue // not on this kernel: the kubelet skips it too
		}
		file := filepath.Join(sysDir, strings.ReplaceAll(key, "/", "."))
		if err := os.MkdirAll(sysDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, value, 0o644); err != nil {
			return err
		}
		if err := unix.Mount(file, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s over %s: %w", file, target, err)
		}
	}
	return nil
}

// do runs f on the namespace's thread (file operations there see the
// node's /run and /var/lib).
func (ns *nodeNS) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case ns.reqs <- func() { errc <- f() }:
	case <-ns.done:
		return errors.New("the node's namespace is gone")
	}
	return <-errc
}

// start forks cmd inside the namespace.
func (ns *nodeNS) start(cmd *exec.Cmd) error {
	return ns.do(cmd.Start)
}

// close ends the thread; the namespace disappears with its last process.
func (ns *nodeNS) close() {
	close(ns.reqs)
	<-ns.done
}

// nodeCgroups are the cgroups the real node makes: one that holds its own
// processes (containerd, its shims, the kubelet, the plugin), found again to
// stop every one of them by PID, and the kubelet's cgroup root, under which
// it puts the pods. Both are removed when the node stops.
type nodeCgroups struct {
	v2 bool
	// hierarchies are the mount points of the cgroup hierarchies (v1: one
	// per controller set; v2: the unified one).
	hierarchies []string
	// track is the hierarchy whose node cgroup lists the node's processes.
	track string
	// Root is the kubelet's cgroupRoot, Node the node processes' cgroup.
	Root, Node string
}

// cgroupHierarchies lists the mounted cgroup hierarchies, and whether the
// machine uses cgroup v2.
func cgroupHierarchies() (hierarchies []string, v2 bool, err error) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}, true, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		// A hybrid host also mounts an (empty) unified hierarchy, where
		// the kubelet makes its cgroups too.
		if fields[sep+1] == "cgroup" || fields[sep+1] == "cgroup2" {
			hierarchies = append(hierarchies, fields[4])
		}
	}
	if len(hierarchies) == 0 {
		return nil, false, errors.New("no cgroup hierarchy is mounted under /sys/fs/cgroup")
	}
	return hierarchies, false, nil
}

// newNodeCgroups creates the two cgroups in every hierarchy.
func newNodeCgroups(name string) (*nodeCgroups, error) {
	hierarchies, v2, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	cg := &nodeCgroups{v2: v2, hierarchies: hierarchies, Root: "/" + name, Node: "/" + name + "-node"}
	cg.track = hierarchies[0]
	for _, h := range hierarchies {
		if filepath.Base(h) == "pids" {
			cg.track = h
		}
	}
	for _, h := range hierarchies {
		for _, dir := range []string{cg.Root, cg.Node} {
			path := filepath.Join(h, dir)
			if err := os.Mkdir(path, 0o755); err != nil && !os.IsExist(err) {
				_ = cg.remove() // best effort; the Mkdir error is the one to report
				return nil, fmt.Errorf("creating cgroup %s: %w", path, err)
			}
			if filepath.Base(h) == "cpuset" {
				// A new v1 cpuset has no CPUs and no memory nodes:
				// nothing could run in it.
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
						_ = os.WriteFile(filepath.Join(path, f), v, 0o644)
					}
				}
			}
		}
	}
	return cg, nil
}

// adopt moves a process of the node into the node's cgroup; its children
// (containerd's shims) stay there.
func (cg *nodeCgroups) adopt(pid int) error {
	path := filepath.Join(cg.track, cg.Node, "cgroup.procs")
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("moving pid %d into %s: %w", pid, path, err)
	}
	return nil
}

// pids lists every process in the cgroup tree dir of the tracking
// hierarchy and, for the pods, of every hierarchy.
func (cg *nodeCgroups) pids(dir string) []int {
	seen := map[int]bool{}
	var out []int
	for _, h := range cg.hierarchies {
		_ = filepath.WalkDir(filepath.Join(h, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// kill SIGKILLs, by PID, every process left in the cgroup tree dir and waits
// until the tree is empty.
func (cg *nodeCgroups) kill(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := cg.pids(dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of cgroup %s survive SIGKILL", pids, dir)
		}
		for _, pid := range pids {
			if pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// remove deletes both cgroup trees in every hierarchy, deepest first.
func (cg *nodeCgroups) remove() error {
	var errs []error
	for _, h := range cg.hierarchies {
		for _, dir := range []string{cg.Root, cg.Node} {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(h, dir), func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
					errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupPrefix names the real nodes' cgroups, followed by the owner's PID.
const cgroupPrefix = "gpufrac-e2e-"

// sweepStaleCgroups kills what is left in the cgroups of real nodes whose
// test process is gone (killed by go test's timeout: its children died by
// Pdeathsig, its pods' processes did not) and removes those cgroups.
func sweepStaleCgroups(logger klog.Logger) {
	hierarchies, _, err := cgroupHierarchies()
	if err != nil {
		return
	}
	for _, h := range hierarchies {
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			if !ok || !e.IsDir() || strings.HasSuffix(rest, "-node") {
				continue
			}
			pidStr, _, _ := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidStr)
			if err != nil || pid == os.Getpid() || processAlive(pid) {
				continue
			}
			cg := &nodeCgroups{hierarchies: hierarchies, track: h, Root: "/" + e.Name(), Node: "/" + e.Name() + "-node"}
			_ = cg.kill(cg.Root, 5*time.Second)
			_ = cg.kill(cg.Node, 5*time.Second)
			if err := cg.remove(); err == nil {
				logger.V(2).Info("Removed the cgroups of a real node that did not clean up", "cgroup", cg.Root, "pid", pid)
			}
		}
	}
}
