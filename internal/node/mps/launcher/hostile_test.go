// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileDriverRoot: a --driver-root that is not a driver root is
// refused before anything is created under it (issue 34: the launcher
// made proc, dev and sys under a wrong root on the host before failing).
// Exec runs in a goroutine of its own locked thread: the thread, and any
// namespace it entered, ends with the goroutine.
func TestHostileDriverRoot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string) string
		want  string
	}{
		{"an empty directory", func(t *testing.T, root string) string { return root },
			"is not a driver root: it has no proc directory"},
		{"a path that does not exist", func(t *testing.T, root string) string { return filepath.Join(root, "missing") },
			"does not exist"},
		{"a file", func(t *testing.T, root string) string {
			p := filepath.Join(root, "file")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, "is not a directory"},
		{"proc a link out of the root", func(t *testing.T, root string) string {
			for _, d := range []string{"dev", "sys", "tmp"} {
				if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink("/proc", filepath.Join(root, "proc")); err != nil {
				t.Fatal(err)
			}
			return root
		}, "proc is a symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := tc.setup(t, base)
			before := tree(t, base)
			p, err := NewPlan(root, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error)
			go func() { done <- Exec(p, []string{"true"}) }()
			err = <-done
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
			if after := tree(t, base); after != before {
				t.Errorf("created under the root before failing:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// tree lists every path under dir.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var paths []string
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			paths = append(paths, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return strings.Join(paths, " ")
}

// TestDanglingLinkMessage: a program that is a link to nothing inside the
// driver root is named as such, with its target, not as "not found".
func TestDanglingLinkMessage(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/opt/nvidia/nvidia-cuda-mps-control", filepath.Join(bin, "nvidia-cuda-mps-control")); err != nil {
		t.Fatal(err)
	}
	err := explainMissing(root, "nvidia-cuda-mps-control")
	want := "is a symbolic link to /opt/nvidia/nvidia-cuda-mps-control, which does not exist inside the driver root"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}
