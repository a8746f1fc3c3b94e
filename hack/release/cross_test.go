// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gpufrac/gpufrac/internal/mustrun"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// TestCrossImageFromDebianToolchain builds a cgo program for arm64 with the
// unpacked Debian cross compiler (GPUFRAC_CROSS_AARCH64, or the cache
// hack/cmd/release fills; fetched where the tests must run,
// GPUFRAC_E2E=required, skipped elsewhere without one) and checks that the arm64 image gets the program and
// the arm64 C library it names, loader included, at Debian's paths.
func TestCrossImageFromDebianToolchain(t *testing.T) {
	root := os.Getenv(CrossEnv)
	if root == "" {
		if dir, err := CrossCacheDir(); err == nil {
			if _, err := os.Stat(crossCC(dir)); err == nil {
				root = dir
			}
		}
	}
	if root == "" && runtime.GOARCH == "amd64" && !testing.Short() && mustrun.Required() {
		// Where the tests must run, fetch it as make release does (Debian's
		// registry, like the node tier's libseccomp): a skip would hide the
		// only test of the arm64 image's C library.
		dir, err := CrossCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		if err := FetchCross(context.Background(), io.Discard, dir); err != nil {
			t.Fatalf("GPUFRAC_E2E=required, but the aarch64 cross toolchain cannot be fetched: %v", err)
		}
		root = dir
	}
	if root == "" || runtime.GOARCH != "amd64" || testing.Short() {
		t.Skipf("no aarch64 cross toolchain (%s) on this amd64 machine", CrossEnv)
	}
	src := t.TempDir()
	prog := "package main\n\n// #include <stdio.h>\n// static void hi(void) { puts(\"hi\"); }\nimport \"C\"\n\nfunc main() { C.hi() }\n"
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &builder{opts: Options{CrossRoot: root}, p: kubebuild.NewProgress(nil)}
	tc, err := b.toolchain(context.Background(), "arm64")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, "hello"), ".")
	cmd.Dir = src
	cmd.Env = append(append([]string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=1", "GOFLAGS=", "GOWORK=off"}, tc.env...), inherited(append([]string{"GOOS=", "GOARCH=", "CGO_ENABLED=", "GOFLAGS=", "GOWORK="}, tc.env...))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cross build: %v\n%s", err, out)
	}
	df := &harness.DockerfileImage{Copies: map[string]string{"hello": "/usr/local/bin/hello"}}
	img, err := tc.image(context.Background(), df, bin, "test")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range img.Files {
		files[f.Path] = f.Data
	}
	for _, want := range []string{"/usr/local/bin/hello", "/lib/ld-linux-aarch64.so.1", "/lib/aarch64-linux-gnu/libc.so.6"} {
		data, ok := files[want]
		if !ok {
			t.Errorf("the arm64 image has no %s (it has %d files)", want, len(files))
			continue
		}
		if f, err := elf.NewFile(bytes.NewReader(data)); err != nil || f.Machine != elf.EM_AARCH64 {
			t.Errorf("%s is not an aarch64 ELF file (%v)", want, err)
		}
	}
}
