// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package filewrite_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/filewrite"
)

func TestReplaceCountsAndLeavesNoTemp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		write      func(string, []byte, os.FileMode, *filewrite.Counter) error
		wantFsyncs int64
	}{
		{"atomic", filewrite.Atomic, 0},
		{"durable", filewrite.Durable, 4}, // file and directory, twice
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			var c filewrite.Counter
			for _, content := range []string{"one", "two"} {
				if err := tc.write(path, []byte(content), 0o640, &c); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(path)
			if err != nil || string(raw) != "two" {
				t.Fatalf("content %q, %v; want %q", raw, err, "two")
			}
			st, err := os.Stat(path)
			if err != nil || st.Mode().Perm() != 0o640 {
				t.Fatalf("mode %v, %v; want 0640", st.Mode().Perm(), err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want only the file (no temp left)", len(entries))
			}
			if c.Writes() != 2 || c.Fsyncs() != tc.wantFsyncs {
				t.Errorf("counted %d writes, %d fsyncs; want 2, %d", c.Writes(), c.Fsyncs(), tc.wantFsyncs)
			}
		})
	}
}

func TestReplaceFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := filewrite.Atomic(path, []byte("old"), 0o600, nil); err != nil {
		t.Fatal(err)
	}
	// A failed write (here: into a missing directory) touches nothing else.
	if err := filewrite.Atomic(filepath.Join(dir, "missing", "f.json"), []byte("x"), 0o600, nil); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
	raw, _ := os.ReadFile(path)
	if string(raw) != "old" {
		t.Errorf("content %q, want %q", raw, "old")
	}
}

func TestNilCounter(t *testing.T) {
	var c *filewrite.Counter
	c.AddWrite()
	c.AddFsync()
	if c.Writes() != 0 || c.Fsyncs() != 0 {
		t.Error("a nil counter counted")
	}
}
