// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpufrac/gpufrac/internal/buildinfo"
)

// goBuild builds pkgs into dir for goos/goarch, reproducibly: -trimpath
// (no paths of this machine), an empty Go build ID (-buildid=, which also
// leaves the ELF's GNU build ID to the content), -s -w (no symbol or DWARF
// tables), no VCS stamp (-buildvcs=false: the version is stamped instead),
// and an environment that takes nothing from the caller's GOFLAGS,
// CGO_CFLAGS or GOWORK. cgo says whether the binaries link C (NVML's cgo
// wrapper); extra adds variables (CC for a cross compiler).
func (b *builder) goBuild(ctx context.Context, what, dir, goos, goarch string, cgo bool, extra []string, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	env, args := b.goBuildCommand(dir, goos, goarch, cgo, extra, pkgs...)
	return b.p.Run(ctx, what, b.opts.RepoRoot, env, "go", args...)
}

// goBuildCommand is goBuild's environment and go command line. Its
// compiler flags (-trimpath, CGO_CFLAGS) are those the Makefile gives every
// go command, so that a release after `make test` finds the dependencies
// compiled (TestReleaseReusesWhatMakeCompiled).
func (b *builder) goBuildCommand(dir, goos, goarch string, cgo bool, extra []string, pkgs ...string) (env, args []string) {
	env = []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off",
		"CGO_CFLAGS=-Wno-deprecated-declarations", "SOURCE_DATE_EPOCH=" + fmt.Sprint(b.opts.Epoch.Unix())}
	if cgo {
		env[2] = "CGO_ENABLED=1"
	}
	env = append(env, extra...)
	env = append(env, inherited(env)...)
	args = []string{"build", "-v", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= " + buildinfo.LDFlag(b.opts.Version), "-o", dir + "/"}
	return env, append(args, pkgs...)
}

// inherited is the caller's environment less the variables set.
func inherited(set []string) []string {
	skip := map[string]bool{}
	for _, kv := range set {
		skip[strings.SplitN(kv, "=", 2)[0]] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		if !skip[strings.SplitN(kv, "=", 2)[0]] {
			out = append(out, kv)
		}
	}
	return out
}

// cli builds kubectl-gpufrac for every CLIPlatforms platform (without cgo:
// it links no C, test/deps pins that) and archives each with the license;
// it returns the archives by name.
func (b *builder) cli(ctx context.Context) (map[string][]byte, error) {
	license, err := os.ReadFile(filepath.Join(b.opts.RepoRoot, "LICENSE"))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, p := range CLIPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		dir := filepath.Join(b.work, "cli-"+goos+"-"+goarch)
		if err := b.goBuild(ctx, "Building kubectl-gpufrac for "+p, dir, goos, goarch, false, nil, "./cmd/kubectl-gpufrac"); err != nil {
			return nil, err
		}
		bin, err := os.ReadFile(filepath.Join(dir, "kubectl-gpufrac"))
		if err != nil {
			return nil, err
		}
		data, err := tarGz([]entry{{Name: "kubectl-gpufrac", Mode: 0o755, Data: bin}, {Name: "LICENSE", Mode: 0o644, Data: license}}, b.opts.Epoch)
		if err != nil {
			return nil, err
		}
		out[CLIArchive(b.opts.Version, goos, goarch)] = data
	}
	return out, nil
}
