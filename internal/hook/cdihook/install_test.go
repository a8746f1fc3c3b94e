// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
)

// TestInstallReplacesTheHookAtomically installs over an older hook: the
// result is the new content, executable, and no temporary file is left.
func TestInstallReplacesTheHookAtomically(t *testing.T) {
	src := filepath.Join(t.TempDir(), "gpufrac-cdi-hook")
	if err := os.WriteFile(src, []byte("new hook"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "var", "lib", "gpufrac", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, cdihook.BinaryName), []byte("old hook"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst, err := cdihook.Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || string(got) != "new hook" {
		t.Fatalf("installed hook = %q, %v; want the new content", got, err)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("installed hook mode %v, want 0755 (the runtime executes it)", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files in %s after install: %d, want only the hook", dir, len(entries))
	}
	if _, err := cdihook.Install(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("installing a missing binary succeeded")
	}
}
