// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nodebuild builds the pieces of a real Kubernetes node for the
// end-to-end tests (test/e2e): the kubelet, containerd with ctr and its runc
// shim, runc with seccomp, and the CNI plugins the node's pod network needs.
// All come from their published Go modules through the module proxy and are
// cached once per machine under
//
//	${XDG_CACHE_HOME:-$HOME/.cache}/gpufrac/node-<kubernetes version>/
//
// next to a stamp per group holding a hash of its recipe (versions, build
// tags and flags, the Go version, the kubelet's go.mod and go.sum), as
// hack/kubebuild does for the control plane. Cold, the pieces take about 7
// minutes on 2 cores; warm, nothing is built.
//
// runc needs libseccomp: the kubelet always asks for the RuntimeDefault
// seccomp profile, and a runc built without seccomp refuses it ("seccomp:
// config provided but seccomp not supported"). When the system has no
// libseccomp-dev, its Debian package is fetched with `apt-get download` and
// unpacked into the cache (nothing is installed). When neither works, Ensure
// returns an *UnavailableError that says what to install: the end-to-end
// tests skip with it instead of failing.
package nodebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// Versions of the node's pieces besides the kubelet (kubebuild.KubeVersion).
const (
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.3"
	CNIPluginsVersion = "v1.9.1"
)

// Binary names.
const (
	Kubelet    = "kubelet"
	Containerd = "containerd"
	Ctr        = "ctr"
	Shim       = "containerd-shim-runc-v2"
	Runc       = "runc"
	Loopback   = "loopback"
	Tap        = "tap"
	HostLocal  = "host-local"
	PTP        = "ptp"
)

// UnavailableError says why a piece cannot be built on this machine and
// what would make it buildable. Callers that can do without the node (the
// e2e tests) skip with it.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return e.Reason }

// Options say where progress goes and where the cache is.
type Options struct {
	// RepoRoot is the gpufrac checkout; empty finds it from the working
	// directory.
	RepoRoot string
	// CacheDir overrides ${XDG_CACHE_HOME:-$HOME/.cache}/gpufrac/node-<version>.
	CacheDir string
	// Version is the kubelet's release, one of kubebuild.Versions; empty
	// means kubebuild.Selected (kubebuild.VersionEnv, or the default).
	Version string
	// Progress receives step names and elapsed times; nil discards them.
	Progress io.Writer
}

// Binaries are absolute paths of the built binaries, by name; all of them
// are in Dir (containerd finds its shim and the CNI plugins there).
type Binaries struct {
	Dir   string
	Paths map[string]string
}

// group is built by one go command.
type group struct {
	name string
	// module is a directory of the checkout holding a build recipe module
	// (the kubelet); empty means `go install pkg@version` with the
	// package's own go.mod (containerd, runc and the CNI plugins are
	// meant to be built that way and have no replace lines).
	module  string
	version string
	pkgs    map[string]string // binary name → package
	cgo     bool
	tags    string
	ldflags string
}

// groups are the node's pieces with the kubelet of version, whose recipe is
// the kubelet module in kubeletRecipe (relative to the checkout).
func groups(version, kubeletRecipe string) []group {
	return []group{
		{name: "kubelet", module: kubeletRecipe, version: version,
			pkgs: map[string]string{Kubelet: "k8s.io/kubernetes/cmd/kubelet"}, ldflags: kubebuild.LDFlagsFor(version)},
		{name: "containerd", version: ContainerdVersion, pkgs: map[string]string{
			Containerd: "github.com/containerd/containerd/v2/cmd/containerd",
			Ctr:        "github.com/containerd/containerd/v2/cmd/ctr",
			Shim:       "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		}, ldflags: "-s -w"},
		// Static, as runc's own release: the shim runs it from any mount
		// namespace, and a static binary needs no libseccomp.so there.
		{name: "runc", version: RuncVersion, pkgs: map[string]string{Runc: "github.com/opencontainers/runc"},
			cgo: true, tags: "seccomp netgo osusergo", ldflags: "-s -w -extldflags -static"},
		{name: "cni-plugins", version: CNIPluginsVersion, pkgs: map[string]string{
			Loopback:  "github.com/containernetworking/plugins/plugins/main/loopback",
			Tap:       "github.com/containernetworking/plugins/plugins/main/tap",
			HostLocal: "github.com/containernetworking/plugins/plugins/ipam/host-local",
		}, ldflags: "-s -w"},
		// The pod network that a chart's webhook Service is reached
		// through (harness.Options.Workloads); a group of its own, so that
		// the others' recipes stay as they were.
		{name: "cni-ptp", version: CNIPluginsVersion, pkgs: map[string]string{
			PTP: "github.com/containernetworking/plugins/plugins/main/ptp",
		}, ldflags: "-s -w"},
	}
}

// CacheDir is the default cache directory of the node's binaries with the
// selected release's kubelet (kubebuild.Selected).
func CacheDir() (string, error) {
	version, err := kubebuild.Selected()
	if err != nil {
		return "", err
	}
	return CacheDirFor(version)
}

// CacheDirFor is the default cache directory of the node with version's
// kubelet: every piece is there (containerd finds its shim and the CNI
// plugins beside it), so another release links them once more, from Go's
// build cache.
func CacheDirFor(version string) (string, error) {
	kube, err := kubebuild.CacheDirFor(version)
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(kube), "node-"+version), nil
}

// Ensure returns the node's binaries, building those that are missing or
// whose recipe changed.
func Ensure(ctx context.Context, opts Options) (*Binaries, error) {
	if runtime.GOOS != "linux" {
		return nil, &UnavailableError{Reason: "a real node (kubelet, containerd, runc) runs on Linux only; this is " + runtime.GOOS}
	}
	root := opts.RepoRoot
	if root == "" {
		var err error
		if root, err = kubebuild.RepoRoot(); err != nil {
			return nil, err
		}
	}
	version := opts.Version
	if version == "" {
		var err error
		if version, err = kubebuild.Selected(); err != nil {
			return nil, err
		}
	}
	recipeDir, err := kubebuild.RecipeDir(root, version)
	if err != nil {
		return nil, err
	}
	kubeletRecipe, err := filepath.Rel(root, filepath.Join(recipeDir, "kubelet"))
	if err != nil {
		return nil, fmt.Errorf("locating the kubelet's recipe: %w", err)
	}
	cache := opts.CacheDir
	if cache == "" {
		if cache, err = CacheDirFor(version); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("creating the binary cache %s: %w", cache, err)
	}
	p := kubebuild.NewProgress(opts.Progress)
	goVersion, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("running go env GOVERSION (is Go on PATH?): %w", err)
	}
	b := &builder{p: p, root: root, cache: cache, goVersion: strings.TrimSpace(string(goVersion))}
	out := &Binaries{Dir: cache, Paths: map[string]string{}}
	for _, g := range groups(version, kubeletRecipe) {
		if err := b.ensure(ctx, g); err != nil {
			return nil, err
		}
		for name := range g.pkgs {
			out.Paths[name] = filepath.Join(cache, name)
		}
	}
	return out, nil
}

type builder struct {
	p         *kubebuild.Progress
	root      string
	cache     string
	goVersion string
}

func (b *builder) stamp(g group) string { return filepath.Join(b.cache, "."+g.name+".recipe") }

func (b *builder) upToDate(g group, recipe string) bool {
	stamp, err := os.ReadFile(b.stamp(g))
	if err != nil || strings.TrimSpace(string(stamp)) != recipe {
		return false
	}
	for name := range g.pkgs {
		if st, err := os.Stat(filepath.Join(b.cache, name)); err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func (b *builder) ensure(ctx context.Context, g group) error {
	// The prebuilt set's kubelet is the default release's; the
	// compatibility tier's kubelet is always built (containerd, runc and
	// the CNI plugins are the same versions in both tiers).
	if g.name != "kubelet" || g.version == kubebuild.KubeVersion {
		if done, err := kubebuild.UsePrebuilt(ctx, b.p, b.cache, g.name, sortedNames(g)); done || err != nil {
			return err
		}
	}
	var seccomp *seccompLib
	if g.cgo && strings.Contains(g.tags, "seccomp") {
		var err error
		if seccomp, err = findSeccomp(ctx, b.p, b.cache); err != nil {
			return err
		}
	}
	recipe, err := b.recipe(g, seccomp)
	if err != nil {
		return err
	}
	if b.upToDate(g, recipe) {
		return nil
	}
	unlock, err := kubebuild.Lock(ctx, b.p, filepath.Join(b.cache, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if b.upToDate(g, recipe) {
		return nil
	}
	tmp, err := os.MkdirTemp(b.cache, ".build-")
	if err != nil {
		return fmt.Errorf("creating a build directory in %s: %w", b.cache, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	names := sortedNames(g)
	env := buildEnv(g, seccomp)
	// go install pkg@version ignores the current module, so it runs in
	// the empty build directory; GOBIN collects the binaries.
	dir := tmp
	var args []string
	if g.module != "" {
		dir = filepath.Join(b.root, g.module)
		args = []string{"build", "-v", "-trimpath", "-ldflags", g.ldflags, "-o", tmp + "/"}
		for _, n := range names {
			args = append(args, g.pkgs[n])
		}
	} else {
		env = append(env, "GOBIN="+tmp)
		args = []string{"install", "-v", "-trimpath", "-ldflags", g.ldflags}
		if g.tags != "" {
			args = append(args, "-tags", g.tags)
		}
		for _, n := range names {
			args = append(args, g.pkgs[n]+"@"+g.version)
		}
	}
	step := fmt.Sprintf("Building %s %s from the Go module proxy into %s (first run only)", strings.Join(names, ", "), g.version, b.cache)
	if err := b.p.Run(ctx, step, dir, env, "go", args...); err != nil {
		return fmt.Errorf("building %s: %w", strings.Join(names, ", "), err)
	}
	for _, n := range names {
		built := filepath.Join(tmp, filepath.Base(g.pkgs[n]))
		if err := os.Rename(built, filepath.Join(b.cache, n)); err != nil {
			return fmt.Errorf("installing %s into %s: %w", n, b.cache, err)
		}
	}
	if seccomp != nil {
		// A runc that silently lost seccomp fails every pod later, far
		// from the cause: check here.
		out, err := exec.CommandContext(ctx, filepath.Join(b.cache, Runc), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "libseccomp") {
			return fmt.Errorf("the runc just built has no seccomp support (runc --version: %s %v)", strings.TrimSpace(string(out)), err)
		}
	}
	if err := os.WriteFile(b.stamp(g), []byte(recipe+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the recipe stamp: %w", err)
	}
	return nil
}

// recipe hashes everything that decides what g's build produces.
func (b *builder) recipe(g group, seccomp *seccompLib) (string, error) {
	h := sha256.New()
	if g.module != "" {
		for _, f := range []string{"go.mod", "go.sum"} {
			data, err := os.ReadFile(filepath.Join(b.root, g.module, f))
			if err != nil {
				return "", fmt.Errorf("reading the build recipe: %w", err)
			}
			_, _ = fmt.Fprintf(h, "%s %d\n", f, len(data))
			h.Write(data)
		}
	}
	_, _ = fmt.Fprintf(h, "go=%s os=%s arch=%s version=%s cgo=%v tags=%q ldflags=%q", b.goVersion,
		runtime.GOOS, runtime.GOARCH, g.version, g.cgo, g.tags, g.ldflags)
	for _, n := range sortedNames(g) {
		_, _ = fmt.Fprintf(h, " %s=%s", n, g.pkgs[n])
	}
	if seccomp != nil {
		_, _ = fmt.Fprintf(h, " libseccomp=%s", seccomp.version)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func sortedNames(g group) []string { return slices.Sorted(maps.Keys(g.pkgs)) }

// buildEnv pins what changes the output and drops the caller's GOFLAGS (a
// -race or -mod=mod there does not belong in these builds).
func buildEnv(g group, seccomp *seccompLib) []string {
	cgo := "0"
	if g.cgo {
		cgo = "1"
	}
	env := []string{"CGO_ENABLED=" + cgo, "GOFLAGS=-buildvcs=false", "GOWORK=off"}
	if g.module != "" {
		env[1] = "GOFLAGS=-mod=readonly -buildvcs=false"
	}
	skip := map[string]bool{"CGO_ENABLED": true, "GOFLAGS": true, "GOWORK": true, "GOOS": true, "GOARCH": true, "GOBIN": true}
	if seccomp != nil {
		env = append(env, seccomp.env...)
		for _, kv := range seccomp.env {
			skip[strings.SplitN(kv, "=", 2)[0]] = true
		}
	}
	for _, kv := range os.Environ() {
		if !skip[strings.SplitN(kv, "=", 2)[0]] {
			env = append(env, kv)
		}
	}
	return env
}
