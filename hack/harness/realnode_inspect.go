// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

// What a test reads off a running real node, and what it puts into it:
// logs, the cdi-hook's limit records, files as the node's own mount
// namespace holds them, images for its containerd.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufrac/gpufrac/hack/nodebuild"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// PluginLog is the path of the plugin's log; empty with ChartPlugin.
func (n *RealNode) PluginLog() string {
	if p := n.currentPlugin(); p != nil {
		return p.logPath
	}
	return ""
}

// ContainerLog returns what a container of a pod printed, from the log file
// the kubelet keeps under the node's /var/log/pods.
func (n *RealNode) ContainerLog(pod *v1.Pod, container string) (string, error) {
	dir := filepath.Join(n.LogDir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container)
	data, err := os.ReadFile(filepath.Join(dir, "0.log"))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		// CRI log format: TIMESTAMP STREAM TAG MESSAGE.
		if parts := strings.SplitN(line, " ", 4); len(parts) == 4 {
			b.WriteString(parts[3])
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

func (n *RealNode) processes() []*process {
	var out []*process
	for _, p := range []*process{n.containerd, n.kubelet, n.currentPlugin()} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

func (n *RealNode) logTails(lines int) string {
	var b strings.Builder
	for _, proc := range n.processes() {
		state := "running"
		if gone, err := proc.exited(); gone {
			state = err.Error()
		}
		_, _ = fmt.Fprintf(&b, "----- %s of node %s (%s), last %d lines of %s -----\n%s\n", proc.name, n.Name, state, lines, proc.logPath, proc.tail(lines))
	}
	return b.String()
}

// LimitRecords are the limits gpufrac-cdi-hook set on this simulated node,
// in the order it set them.
func (n *RealNode) LimitRecords() ([]gpusim.LimitRecord, error) {
	data, err := n.ReadFile(n.LimitRecord)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []gpusim.LimitRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r gpusim.LimitRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("reading %s: %w", n.LimitRecord, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ReadFile reads a file as the node's processes see it (its /run and
// /var/lib are its own).
func (n *RealNode) ReadFile(path string) ([]byte, error) {
	var data []byte
	err := n.ns.do(func() error {
		var err error
		data, err = os.ReadFile(path)
		return err
	})
	return data, err
}

// ReadDir lists a directory as the node's processes see it; a missing
// directory is empty.
func (n *RealNode) ReadDir(path string) ([]string, error) {
	var names []string
	err := n.ns.do(func() error {
		entries, err := os.ReadDir(path)
		if os.IsNotExist(err) {
			return nil
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return err
	})
	return names, err
}

// ImportImage imports an OCI archive into the node's containerd, as the
// node image is at start: the node never pulls.
func (n *RealNode) ImportImage(ctx context.Context, archive string) error {
	bins, err := nodebuild.Ensure(ctx, nodebuild.Options{Version: n.cp.KubeVersion})
	if err != nil {
		return err
	}
	q := detectQuirks(n.cg.v2)
	return n.run(ctx, "ctr-import", bins.Paths[nodebuild.Ctr], "--address="+containerdSocket, "--namespace=k8s.io",
		"images", "import", "--local", "--snapshotter="+q.snapshotter, archive)
}
