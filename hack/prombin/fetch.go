// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package prombin gives tests a real Prometheus without installing one:
// Debian bookworm's prometheus package (prometheus and promtool 2.42),
// fetched, checked against its pinned SHA-256 and unpacked into a cache by
// hack/debfetch, as the node tier fetches libseccomp; then promtool's rule
// checks and unit tests, and a Prometheus server scraping given HTTP
// targets, queried through its HTTP API.
package prombin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/gpufrac/gpufrac/hack/debfetch"
)

const (
	// Package and Version pin the Debian package: bookworm's, the version
	// its apt index names (2.42.0 upstream). A new Debian build changes
	// the .deb's hash, so the pin is the version and the hash together.
	Package = "prometheus"
	// Version is the Debian version of Package that is pinned.
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
	// A machine without a pin for its architecture is told so by debfetch.
	pin := debfetch.Pin{Package: Package, Version: Version, Arch: "amd64", SHA256: debSHA256["amd64"]}
	if sha, ok := debSHA256[runtime.GOARCH]; ok {
		pin.Arch, pin.SHA256 = runtime.GOARCH, sha
	}
	b := Binaries{
		Prometheus: filepath.Join(dir, "usr", "bin", "prometheus"),
		Promtool:   filepath.Join(dir, "usr", "bin", "promtool"),
		root:       dir,
	}
	err = debfetch.Fetch(ctx, dir, []debfetch.Pin{pin}, debfetch.Options{
		Want: []string{"usr/bin/prometheus", "usr/bin/promtool"},
		Step: func(what string) func(error) {
			_, _ = fmt.Fprintf(os.Stderr, "prombin: %s\n", what)
			return func(error) {}
		},
	})
	if err != nil {
		return Binaries{}, fmt.Errorf("fetching Debian's %s %s into %s: %w", Package, Version, dir, err)
	}
	return b, nil
}
