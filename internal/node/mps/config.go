// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The plugin tells a running daemon what it wants through files in the
// GPU's config directory, and the daemon's script (the template) answers
// by copying a file to <name>.applied once the daemon took it. Files, not
// `kubectl exec`: the plugin needs no pods/exec permission, and a daemon
// recreated after a crash finds its settings where it starts.
const (
	// ConfigFile (legacy MPS) holds the daemon-side pinned device memory
	// limit in MiB, applied with set_default_device_pinned_mem_limit.
	ConfigFile = "pinned-mem-limit-mib"
	// NamespacesFile (MPS v3) lists one line per SMSharing claim (TimeSlicing
	// claims need the daemon but no namespace):
	// "<namespace> <pinned memory limit MiB> <active thread percentage>",
	// sorted; the script creates, changes and deletes namespaces of the
	// shared server to match.
	NamespacesFile = "namespaces"
	// AppliedSuffix marks what the daemon has applied.
	AppliedSuffix = ".applied"
)

// desired is the settings file of a daemon and its content for the
// claims that use it.
func desired(version string, users users) (string, string) {
	if version != domain.MPSVersionV3 {
		var ceiling int64
		for _, u := range users {
			ceiling = max(ceiling, u.hardMiB)
		}
		return ConfigFile, fmt.Sprintf("%d\n", ceiling)
	}
	lines := make([]string, 0, len(users))
	for _, u := range users {
		if u.namespace == "" {
			// A TimeSlicing share: a client of the main socket, which
			// needs the daemon but no namespace.
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %d %d\n", u.namespace, u.hardMiB, u.threads))
	}
	slices.Sort(lines)
	return NamespacesFile, strings.Join(lines, "")
}

// writeConfig replaces a settings file atomically: the daemon's script
// reads it at any moment.
func writeConfig(b mpslayout.Binding, file, content string) error {
	dir := ConfigDir(b)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating MPS config directory: %w", err)
	}
	tmp := filepath.Join(dir, file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing MPS settings %s: %w", file, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("writing MPS settings %s: %w", file, err)
	}
	return nil
}

// waitApplied waits, until ctx ends, for the daemon to report the
// settings applied, so a container never starts before its limit (legacy)
// or its namespace (v3) exists: a client arriving earlier would get a
// server without limits or find no socket.
func (m *Manager) waitApplied(ctx context.Context, b mpslayout.Binding, file, content string) error {
	path := filepath.Join(ConfigDir(b), file+AppliedSuffix)
	var got string
	start := time.Now()
	applied := poll(ctx, 20*time.Millisecond, func(context.Context) bool {
		raw, _ := os.ReadFile(path)
		got = string(raw)
		return got == content
	})
	if !applied {
		return fmt.Errorf("MPS daemon %s/%s of %s did not apply its settings after %s (want %q in %s, have %q); last daemon log lines: %s",
			m.cfg.Namespace, PodName(m.cfg.NodeName, b.DaemonKey()), daemonName(b.DaemonKey()), time.Since(start).Round(100*time.Millisecond),
			strings.TrimSpace(content), path, strings.TrimSpace(got), tailLog(b.LogDir, 5))
	}
	return nil
}

// poll calls done first interval apart, doubling up to 1 s, until it
// returns true (poll returns true) or ctx ends (false). Not wait.Backoff
// with a Cap: reaching the cap zeroes its Steps and ends the wait after a
// few seconds, long before ctx's deadline.
func poll(ctx context.Context, first time.Duration, done func(context.Context) bool) bool {
	interval := first
	for {
		if done(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
		}
		interval = min(2*interval, time.Second)
	}
}
