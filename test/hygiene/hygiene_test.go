// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hygiene

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tracked lists the files git tracks, relative to the repository root.
func tracked(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var paths []string
	for _, p := range strings.Split(string(out), "\x00") {
		if p != "" {
			paths = append(paths, p)
		}
	}
	if len(paths) < 100 {
		t.Fatalf("git ls-files listed %d files", len(paths))
	}
	return root, paths
}

func TestNoBinaryIsTracked(t *testing.T) {
	root, paths := tracked(t)
	problems, err := CheckTracked(root, paths, AllowedLarge())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestGuardFailsOnAPlantedBinary: the guard finds a built Go binary, an
// ELF header alone, a Mach-O one and a file over the size bound, and lets
// source, a script and an allowed path through.
func TestGuardFailsOnAPlantedBinary(t *testing.T) {
	dir := t.TempDir()
	build := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(dir, "prepcompare"), "./testdata/hello")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("elf-head", []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	write("macho", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1})
	write("huge.json", make([]byte, MaxTrackedBytes+1))
	write("main.go", []byte("package main\n"))
	write("run.sh", []byte("#!/bin/sh\necho hi\n"))
	write("allowed.bin", []byte{0x7f, 'E', 'L', 'F'})
	allowed := map[string]string{"allowed.bin": "a planted test entry"}

	problems, err := CheckTracked(dir, []string{"prepcompare", "elf-head", "macho", "huge.json", "main.go", "run.sh", "allowed.bin", "gone"}, allowed)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"prepcompare: an executable (ELF", "elf-head: an executable (ELF", "macho: an executable (Mach-O", "huge.json: 1048577 bytes"}
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want %d of them", problems, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d = %q, want it to start with %q", i, problems[i], w)
		}
	}
}

func TestEveryGoFileHasTheLicenseHeader(t *testing.T) {
	root, paths := tracked(t)
	problems, err := CheckHeaders(root, paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bare.go"), []byte("package bare\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := CheckHeaders(dir, []string{"bare.go"}); len(got) != 1 {
		t.Errorf("CheckHeaders on a file without the header = %q, want one problem", got)
	}
}
