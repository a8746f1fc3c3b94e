// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodebuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/test/kubebuild"
)

// seccompLib is how runc's build finds libseccomp (its Go binding asks
// pkg-config).
type seccompLib struct {
	version string
	env     []string
}

const seccompPackage = "libseccomp-dev"

// findSeccomp returns the system's libseccomp when pkg-config knows it, or
// the Debian package unpacked into the cache (fetched once with `apt-get
// download`, which installs nothing), or an *UnavailableError saying what to
// install.
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
	pcDir, err := findPC(root)
	if err != nil {
		if err := unpackDeb(ctx, p, cache, root); err != nil {
			return nil, err
		}
		if pcDir, err = findPC(root); err != nil {
			return nil, &UnavailableError{Reason: fmt.Sprintf("the unpacked %s in %s has no libseccomp.pc; install %s", seccompPackage, root, seccompPackage)}
		}
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

// unpackDeb fetches the libseccomp-dev package of this machine's Debian or
// Ubuntu release and unpacks it under root.
func unpackDeb(ctx context.Context, p *kubebuild.Progress, cache, root string) error {
	unavailable := func(why string) error {
		return &UnavailableError{Reason: fmt.Sprintf("building runc with seccomp needs libseccomp's headers and static library, and %s: install %s (Debian/Ubuntu: apt-get install %s), then run again", why, seccompPackage, seccompPackage)}
	}
	for _, tool := range []string{"apt-get", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			return unavailable("this machine has no " + tool + " to fetch it with")
		}
	}
	tmp, err := os.MkdirTemp(cache, ".libseccomp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// apt-get download writes into its working directory. Bounded: a
	// machine without a reachable mirror should skip soon, not hang.
	fetchCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := p.Run(fetchCtx, "Fetching "+seccompPackage+" (apt-get download; nothing is installed) for runc's seccomp support", tmp, os.Environ(), "apt-get", "download", seccompPackage); err != nil {
		return unavailable(fmt.Sprintf("`apt-get download %s` failed (%v)", seccompPackage, err))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, seccompPackage+"_*.deb"))
	if len(debs) != 1 {
		return unavailable("apt-get download left no single .deb")
	}
	unpacked := filepath.Join(tmp, "root")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "dpkg", "-x", debs[0], unpacked)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return unavailable(fmt.Sprintf("dpkg -x failed: %v: %s", err, strings.TrimSpace(out.String())))
	}
	_ = os.RemoveAll(root)
	return os.Rename(unpacked, root)
}
