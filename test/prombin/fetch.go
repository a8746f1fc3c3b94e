// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package prombin gives tests a real Prometheus without installing one:
// Debian bookworm's prometheus package (prometheus and promtool 2.42),
// fetched with `apt-get download` and unpacked with `dpkg-deb -x` into a
// cache, as the node tier fetches libseccomp; then promtool's rule checks
// and unit tests, and a Prometheus server scraping given HTTP targets,
// queried through its HTTP API.
package prombin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

const (
	// Package and Version pin the Debian package: bookworm's, the version
	// its apt index names (2.42.0 upstream). A new Debian build changes
	// the .deb's hash, so the pin is the version and the hash together.
	Package = "prometheus"
	Version = "2.42.0+ds-5+b6"
)

// debSHA256 is the .deb's SHA-256 per architecture, as apt's own metadata
// gives it (`apt-cache show prometheus=2.42.0+ds-5+b6`, field SHA256):
// apt checks the download against its signed index; this check also holds
// when the index moves on to a rebuild of the same version.
var debSHA256 = map[string]string{
	"amd64": "3b0e0255b059a7696bd4a139a4a4eb24d71df067936a61ece5093559cbc7991c",
}

// Binaries are the unpacked programs' paths.
type Binaries struct {
	Prometheus string
	Promtool   string
	// root is the unpacked package (for the server's web assets).
	root string
}

// CacheDir is where Fetch unpacks the package: beside the Kubernetes
// binaries' caches, under $XDG_CACHE_HOME (or ~/.cache)/gpufrac.
func CacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the cache directory (set XDG_CACHE_HOME or HOME): %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "gpufrac", "prometheus-2.42"), nil
}

// Fetch returns the cached binaries, fetching and unpacking the pinned
// package first when the cache does not hold it. Concurrent test binaries
// share one fetch (a file lock beside the cache).
func Fetch(ctx context.Context) (Binaries, error) {
	dir, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	if b, ok := cached(dir); ok {
		return b, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Binaries{}, err
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()
	if b, ok := cached(dir); ok {
		return b, nil
	}
	if err := fetchDeb(ctx, dir); err != nil {
		return Binaries{}, fmt.Errorf("fetching Debian's %s %s into %s: %w", Package, Version, dir, err)
	}
	if b, ok := cached(dir); ok {
		return b, nil
	}
	return Binaries{}, fmt.Errorf("the unpacked %s %s in %s holds no usr/bin/prometheus and usr/bin/promtool", Package, Version, dir)
}

// markerFile records which .deb the cache was unpacked from, so a changed
// pin fetches again instead of using stale binaries.
const markerFile = ".deb-sha256"

func cached(dir string) (Binaries, bool) {
	want, ok := debSHA256[runtime.GOARCH]
	if !ok {
		return Binaries{}, false
	}
	got, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil || strings.TrimSpace(string(got)) != want {
		return Binaries{}, false
	}
	b := Binaries{
		Prometheus: filepath.Join(dir, "usr", "bin", "prometheus"),
		Promtool:   filepath.Join(dir, "usr", "bin", "promtool"),
		root:       dir,
	}
	for _, p := range []string{b.Prometheus, b.Promtool} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return Binaries{}, false
		}
	}
	return b, true
}

// fetchDeb downloads the pinned package (nothing is installed: `apt-get
// download` writes the .deb into its working directory), checks its hash
// and unpacks it into dir.
func fetchDeb(ctx context.Context, dir string) error {
	want, ok := debSHA256[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no pinned SHA-256 of the %s package for %s (pinned: amd64): add it from `apt-cache show %s=%s`", Package, runtime.GOARCH, Package, Version)
	}
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("this machine has no %s to fetch and unpack the package with (Debian/Ubuntu have it)", tool)
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".prometheus-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// Bounded: a machine without a reachable mirror should skip soon, not
	// hang.
	fetchCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, _ = fmt.Fprintf(os.Stderr, "prombin: fetching %s=%s (apt-get download; nothing is installed) into %s\n", Package, Version, dir)
	cmd := exec.CommandContext(fetchCtx, "apt-get", "download", Package+"="+Version)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s=%s: %w: %s", Package, Version, err, tail(out))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, Package+"_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download left %d .deb files in %s, want 1", len(debs), tmp)
	}
	got, err := fileSHA256(debs[0])
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s has SHA-256 %s, want %s (the pin for %s=%s on %s)", filepath.Base(debs[0]), got, want, Package, Version, runtime.GOARCH)
	}
	root := filepath.Join(tmp, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %w: %s", debs[0], err, tail(out))
	}
	if err := os.WriteFile(filepath.Join(root, markerFile), []byte(got+"\n"), 0o644); err != nil {
		return err
	}
	_ = os.RemoveAll(dir)
	return os.Rename(root, dir)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockFile takes an exclusive flock on path, giving up when ctx ends.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the fetch lock %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() { done <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		return func() { _ = f.Close() }, nil
	case <-ctx.Done():
		_ = f.Close() // the blocked flock returns with the file closed
		return nil, fmt.Errorf("waiting for another fetch of %s (lock %s): %w", Package, path, context.Cause(ctx))
	}
}

// tail is the last lines of a command's output, for an error.
func tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
