// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeSchedulerFlagRefusesWhatCannotRun: -kube-scheduler names a
// file that must exist and be executable; the refusal names the flag and
// the path before any control plane starts. Empty keeps the harness's own.
func TestKubeSchedulerFlagRefusesWhatCannotRun(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "kube-scheduler")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"missing":        filepath.Join(dir, "nope"),
		"not executable": plain,
		"a directory":    dir,
	} {
		t.Run(name, func(t *testing.T) {
			bins, err := binaries(context.Background(), path)
			if err == nil {
				t.Fatalf("binaries(%q) = %v, want an error", path, bins)
			}
			if !strings.Contains(err.Error(), "-kube-scheduler") || !strings.Contains(err.Error(), filepath.Base(path)) {
				t.Errorf("error %q names neither the flag nor the path", err)
			}
		})
	}
	if bins, err := binaries(context.Background(), ""); err != nil || bins != nil {
		t.Errorf("binaries(\"\") = %v, %v; want nil, nil (the harness finds its own)", bins, err)
	}
}
