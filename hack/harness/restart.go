// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
)

func (n *Node) currentPlugin() *process {
	n.cp.mu.Lock()
	defer n.cp.mu.Unlock()
	return n.plugin
}

// PluginPID is the process id of the node's plugin now.
func (n *Node) PluginPID() int { return n.currentPlugin().cmd.Process.Pid }

// WaitPluginExit waits until the plugin process exits and returns how it
// ended: a crash test tells its own SIGKILL from any other exit.
func (n *Node) WaitPluginExit(ctx context.Context) (syscall.WaitStatus, error) {
	p := n.currentPlugin()
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for the plugin of node %s (pid %d) to exit: %w", n.Name, p.cmd.Process.Pid, context.Cause(ctx))
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return 0, errors.New("no wait status for the plugin process")
	}
	return ws, nil
}

// KillPlugin SIGKILLs the plugin (by its PID) and waits until it is gone:
// a crash at an arbitrary instant.
func (n *Node) KillPlugin(ctx context.Context) error {
	p := n.currentPlugin()
	n.cp.recordPeak(p)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing the plugin of node %s: %w", n.Name, err)
	}
	_, err := n.WaitPluginExit(ctx)
	return err
}

// StopPlugin stops the plugin as a rolling update does (SIGTERM, then
// SIGKILL after the grace period).
func (n *Node) StopPlugin() error {
	p := n.currentPlugin()
	n.cp.recordPeak(p)
	return p.stop(stopGrace)
}

// RestartPlugin starts the node's plugin again, after it exited, with the
// node's base flags plus extra (NodeOptions.PluginArgs are not repeated:
// a crash test restarts without its failpoint). binary empty keeps the
// node's binary. Like the kubelet's plugin watcher, the stand-in then
// registers the new process and talks to it from then on.
func (n *Node) RestartPlugin(ctx context.Context, binary string, extra ...string) error {
	old := n.currentPlugin()
	if gone, _ := old.exited(); !gone {
		return fmt.Errorf("the plugin of node %s (pid %d) still runs; stop or kill it first", n.Name, old.cmd.Process.Pid)
	}
	if binary == "" {
		binary = n.pluginBin
	}
	args := append(slices.Clone(n.pluginArgs), extra...)
	p, err := startProcess("gpufrac-kubelet-plugin", n.stateDir, binary, args, nil)
	if err != nil {
		return err
	}
	n.cp.mu.Lock()
	n.plugin = p
	n.cp.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Restarted the plugin", "node", n.Name, "pid", p.cmd.Process.Pid, "args", strings.Join(extra, " "))
	if n.StandIn != nil {
		if err := n.StandIn.Reregister(ctx); err != nil {
			return fmt.Errorf("%w\n----- last lines of %s -----\n%s", err, p.logPath, p.tail(40))
		}
	}
	return nil
}

// ProcStatus reads the plugin's resident memory (VmRSS, bytes) and number
// of open file descriptors from /proc.
func (n *Node) ProcStatus() (rss uint64, fds int, err error) {
	pid := n.PluginPID()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the plugin's status: %w", err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "VmRSS:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("parsing VmRSS of %d: %w", pid, err)
			}
			rss = kb * 1024
		}
	}
	entries, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, 0, fmt.Errorf("listing the plugin's file descriptors: %w", err)
	}
	return rss, len(entries), nil
}

// FreePort returns a loopback TCP port free now, for a plugin's
// --metrics-address.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
