// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// A cache written by the host's real ldconfig, over a root holding a
// library built with gcc, parses to that library's SONAME and path.
func TestParseLDCacheReadsWhatLdconfigWrote(t *testing.T) {
	mustrun.NeedRoot(t, "ldconfig -r chroots")
	gcc, err := exec.LookPath("gcc")
	mustrun.Need(t, err == nil, "gcc is needed to build the library the cache indexes")
	root := t.TempDir()
	src := filepath.Join(t.TempDir(), "s.c")
	if err := os.WriteFile(src, []byte("int f(void) { return 1; }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"usr/lib64", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lib := filepath.Join(root, "usr/lib64/libcuda.so.580.65.06")
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	if out, err := exec.Command("/sbin/ldconfig", "-r", root, "-C", "/etc/ld.so.cache", "/usr/lib64").CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v: %s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := parseLDCache(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(entries, cacheEntry{Name: "libcuda.so.1", Path: "/usr/lib64/libcuda.so.1"}) {
		t.Errorf("entries %v lack libcuda.so.1 → /usr/lib64/libcuda.so.1", entries)
	}
	// Cut short or foreign, it is refused rather than misread.
	for name, bad := range map[string][]byte{
		"empty": nil, "old format only": []byte("ld.so-1.7.0\x00\x00\x00\x00\x00"), "other": []byte("not a cache at all, not at all, not at all, no"),
	} {
		if _, err := parseLDCache(bad); err == nil {
			t.Errorf("%s cache was accepted", name)
		}
	}
	if _, err := parseLDCache(raw[:50]); err == nil {
		t.Error("a cache cut inside its entries was accepted")
	}
}
