// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// TestReleaseReusesWhatMakeCompiled: a package compiled by a go command the
// Makefile runs (its exported GOFLAGS and CGO_CFLAGS, as `make test` builds
// the binaries) is not compiled again by the release's build, whose flags a
// reproducible release fixes. Without it CI's cold `make test-release`
// compiled every dependency once more per platform (26 minutes of a run
// that CI stopped at 90; docs/design/testing.md). The check reads make's
// own values, so removing the Makefile's -trimpath, or giving the release
// a compiler flag the Makefile lacks, fails here.
func TestReleaseReusesWhatMakeCompiled(t *testing.T) {
	_, err := exec.LookPath("make")
	mustrun.Need(t, err == nil, "make not found: the Makefile's flags cannot be read")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	makeEnv := makeExports(t, root, "GOFLAGS", "CGO_CFLAGS", "CGO_ENABLED")
	if !strings.Contains(" "+makeEnv["GOFLAGS"]+" ", " -trimpath ") {
		t.Errorf("the Makefile's GOFLAGS are %q: without -trimpath nothing `make test` compiles serves the release", makeEnv["GOFLAGS"])
	}
	src := t.TempDir()
	files := map[string]string{
		"go.mod":     "module hello\n\ngo 1.26\n",
		"main.go":    "package main\n\nimport \"hello/greet\"\n\nfunc main() { greet.Hi() }\n",
		"greet/g.go": "package greet\n\nimport \"fmt\"\n\n// Hi greets.\nfunc Hi() { fmt.Println(\"hi\") }\n",
	}
	for name, text := range files {
		path := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As `make test`'s harness builds a binary of this checkout.
	first := exec.CommandContext(t.Context(), "go", "build", "-o", t.TempDir()+"/", ".")
	first.Dir = src
	first.Env = append(os.Environ(), "GOFLAGS="+makeEnv["GOFLAGS"], "CGO_CFLAGS="+makeEnv["CGO_CFLAGS"],
		"CGO_ENABLED="+makeEnv["CGO_ENABLED"], "GOWORK=off")
	if out, err := first.CombinedOutput(); err != nil {
		t.Fatalf("building as make does: %v\n%s", err, out)
	}
	// The release's build of the same packages: -v names each package it
	// compiles, so only the main package (its version stamp) may appear.
	b := &builder{opts: Options{Version: "0.0.0-test", Epoch: time.Unix(1700000000, 0)}}
	env, args := b.goBuildCommand(t.TempDir(), runtime.GOOS, runtime.GOARCH, makeEnv["CGO_ENABLED"] == "1", nil, ".")
	second := exec.CommandContext(t.Context(), "go", args...)
	second.Dir, second.Env = src, env
	out, err := second.CombinedOutput()
	if err != nil {
		t.Fatalf("the release's build: %v\n%s", err, out)
	}
	var again []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && line != "hello" {
			again = append(again, line)
		}
	}
	if len(again) > 0 {
		t.Errorf("the release's build compiled %d packages again (%s): its flags differ from the Makefile's (GOFLAGS %q, CGO_CFLAGS %q), so the build cache cannot serve it",
			len(again), strings.Join(again[:min(len(again), 5)], ", "), makeEnv["GOFLAGS"], makeEnv["CGO_CFLAGS"])
	}
}

// makeExports are the values the Makefile gives the named variables, read
// from make itself with the caller's environment for them removed (under
// `make test` they already carry the Makefile's values).
func makeExports(t *testing.T, root string, names ...string) map[string]string {
	t.Helper()
	echoes := make([]string, 0, len(names))
	for _, n := range names {
		echoes = append(echoes, "echo '"+n+"=$("+n+")'")
	}
	rule := "print-exports: ; @" + strings.Join(echoes, "; ")
	cmd := exec.CommandContext(t.Context(), "make", "-s", "--no-print-directory", "-C", root, "--eval", rule, "print-exports")
	unset := []string{"MAKEFLAGS=", "MAKELEVEL=", "MFLAGS="}
	for _, n := range names {
		unset = append(unset, n+"=")
	}
	cmd.Env = inherited(unset)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reading the Makefile's %v: %v", names, err)
	}
	vals := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vals[k] = strings.TrimSpace(v)
	}
	for _, n := range names {
		if _, ok := vals[n]; !ok {
			t.Fatalf("make printed no %s: %q", n, out)
		}
	}
	return vals
}
