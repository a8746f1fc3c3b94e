// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func writeRecipe(t *testing.T, dir, gomod string) {
	t.Helper()
	for name, content := range map[string]string{"go.mod": gomod, "go.sum": "", "etcd/go.mod": gomod + "// etcd\n", "etcd/go.sum": "", "etcd/main.go": "package main\n"} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecipeHashFollowsTheRecipe: a changed go.mod (a new Kubernetes patch
// release, a new replace) means other binaries, so a new hash and a rebuild.
func TestRecipeHashFollowsTheRecipe(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeRecipe(t, dir, "module x\n\nrequire k8s.io/kubernetes v1.37.2\n")
	a, err := recipeHash(ctx, dir, controlPlane, LDFlags())
	if err != nil {
		t.Fatal(err)
	}
	again, err := recipeHash(ctx, dir, controlPlane, LDFlags())
	if err != nil || again != a {
		t.Fatalf("the same recipe hashes differently: %s, %s (%v)", a, again, err)
	}
	etcd, err := recipeHash(ctx, dir, etcdGroup, LDFlags())
	if err != nil || etcd == a {
		t.Fatalf("etcd's recipe hash %s equals the control plane's %s (%v)", etcd, a, err)
	}
	writeRecipe(t, dir, "module x\n\nrequire k8s.io/kubernetes v1.37.3\n")
	b, err := recipeHash(ctx, dir, controlPlane, LDFlags())
	if err != nil || b == a {
		t.Fatalf("a changed go.mod kept the recipe hash %s (%v)", a, err)
	}
}

// TestUpToDateNeedsStampAndBinaries: binaries are reused only when the stamp
// matches the recipe and every binary of the group is there and executable.
func TestUpToDateNeedsStampAndBinaries(t *testing.T) {
	cache := t.TempDir()
	if upToDate(cache, controlPlane, "r1") {
		t.Fatal("an empty cache is up to date")
	}
	for name := range controlPlane.pkgs {
		if err := os.WriteFile(filepath.Join(cache, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if upToDate(cache, controlPlane, "r1") {
		t.Fatal("binaries without a stamp are up to date")
	}
	if err := os.WriteFile(stampPath(cache, controlPlane), []byte("r1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !upToDate(cache, controlPlane, "r1") {
		t.Fatal("binaries with a matching stamp are not up to date")
	}
	if upToDate(cache, controlPlane, "r2") {
		t.Fatal("a changed recipe is up to date")
	}
	if err := os.Remove(filepath.Join(cache, KubeScheduler)); err != nil {
		t.Fatal(err)
	}
	if upToDate(cache, controlPlane, "r1") {
		t.Fatal("a missing binary is up to date")
	}
}
