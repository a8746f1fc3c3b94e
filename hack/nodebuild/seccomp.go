// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodebuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpufrac/gpufrac/hack/debfetch"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// seccompLib is how runc's build finds libseccomp (its Go binding asks
// pkg-config).
type seccompLib struct {
	version string
	env     []string
}

const seccompPackage = "libseccomp-dev"

// seccompPin is the libseccomp-dev that runc is built against where the
// system has none: bookworm's, the version `apt-cache policy
// libseccomp-dev` and `apt-get download` serve (2.5.4 upstream; its hash
// from `apt-cache show libseccomp-dev=2.5.4-1+deb12u1`, field SHA256). A
// pin, not whatever the index names today: the runc of every end-to-end
// test is linked with it, so a changed package must fail loudly instead of
// changing the node we test on. Other architectures build against their
// system's libseccomp-dev (an *UnavailableError says so).
var seccompPin = debfetch.Pin{Package: seccompPackage, Version: "2.5.4-1+deb12u1", Arch: "amd64",
	SHA256: "5fb305f3aeb293e2b78a4cfcb58c0f42179703c371a408d002c8454661e6b7b2"}

// findSeccomp returns the system's libseccomp when pkg-config knows it, or
// the pinned Debian package unpacked into the cache (fetched once with
// `apt-get download`, which installs nothing, and again only when the pin
// moves), or an *UnavailableError saying what to install.
func findSeccomp(ctx context.Context, p *kubebuild.Progress, cache string) (*seccompLib, error) {
	if _, err := exec.LookPath("pkg-config"); err != nil {
		return nil, &UnavailableError{Reason: "building runc with seccomp needs pkg-config and libseccomp-dev: install them (Debian/Ubuntu: apt-get install pkg-config libseccomp-dev)"}
	}
	if out, err := exec.CommandContext(ctx, "pkg-config", "--modversion", "libseccomp").Output(); err == nil {
		if hasStaticLib(ctx, nil) {
			return &seccompLib{version: "system-" + strings.TrimSpace(string(out))}, nil
		}
	}
	root := filepath.Join(cache, "libseccomp")
	if err := fetchSeccomp(ctx, p, root); err != nil {
		return nil, err
	}
	pcDir, err := findPC(root)
	if err != nil {
		return nil, &UnavailableError{Reason: fmt.Sprintf("the unpacked %s in %s has no libseccomp.pc; install %s", seccompPin, root, seccompPackage)}
	}
	// The package's .pc says prefix=/usr; the sysroot makes pkg-config
	// point -I and -L into the unpacked tree.
	env := []string{"PKG_CONFIG_SYSROOT_DIR=" + root, "PKG_CONFIG_PATH=" + pcDir, "PKG_CONFIG_LIBDIR=" + pcDir}
	cmd := exec.CommandContext(ctx, "pkg-config", "--modversion", "libseccomp")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return nil, &UnavailableError{Reason: fmt.Sprintf("pkg-config cannot read the unpacked libseccomp in %s (%v); install %s", root, err, seccompPackage)}
	}
	if !hasStaticLib(ctx, env) {
		return nil, &UnavailableError{Reason: fmt.Sprintf("no libseccomp.a in %s; install %s", root, seccompPackage)}
	}
	return &seccompLib{version: "deb-" + strings.TrimSpace(string(out)), env: env}, nil
}

// hasStaticLib reports whether libseccomp.a is where pkg-config's -L points
// (runc is linked statically).
func hasStaticLib(ctx context.Context, env []string) bool {
	cmd := exec.CommandContext(ctx, "pkg-config", "--variable=libdir", "libseccomp")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	dir := strings.TrimSpace(string(out))
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PKG_CONFIG_SYSROOT_DIR="); ok && !strings.HasPrefix(dir, v) {
			// --variable is not prefixed with the sysroot.
			dir = filepath.Join(v, dir)
		}
	}
	_, err = os.Stat(filepath.Join(dir, "libseccomp.a"))
	return err == nil
}

func findPC(root string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(root, "usr", "lib", "*", "pkgconfig", "libseccomp.pc"))
	if err != nil || len(matches) == 0 {
		return "", fmt.Errorf("no libseccomp.pc under %s", root)
	}
	return filepath.Dir(matches[0]), nil
}

// fetchSeccomp makes root hold seccompPin unpacked (hack/debfetch: the
// download checked against the pin, a marker, a lock, bounded time). A
// package that differs from the pin is an error; any other reason it cannot
// be fetched here is an *UnavailableError saying what to install instead.
func fetchSeccomp(ctx context.Context, p *kubebuild.Progress, root string) error {
	err := debfetch.Fetch(ctx, root, []debfetch.Pin{seccompPin}, debfetch.Options{
		Step: func(string) func(error) {
			return p.Step(fmt.Sprintf("Fetching %s (apt-get download; nothing is installed) for runc's seccomp support", seccompPin))
		},
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, debfetch.ErrMismatch):
		return fmt.Errorf("runc's libseccomp: %w", err)
	}
	return &UnavailableError{Reason: fmt.Sprintf("building runc with seccomp needs libseccomp's headers and static library, "+
		"and fetching %s failed (%v): install %s (Debian/Ubuntu: apt-get install %s), then run again", seccompPin, err, seccompPackage, seccompPackage)}
}
