// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package debfetch brings Debian packages that tests need (Prometheus,
// libseccomp's headers for runc, an aarch64 cross compiler) without
// installing anything: `apt-get download` of a pinned version into a
// temporary directory, each .deb checked against its pinned SHA-256, then
// `dpkg-deb -x` into one tree that replaces the destination whole. The tree
// carries a marker of the hashes it was unpacked from, so a cache is reused
// only while the pins are the same, and a file lock beside it lets
// concurrent test processes share one fetch.
//
// The pin is the version and the hash together: apt checks a download
// against its signed index only, and the index moves on (a point release, a
// binNMU rebuild under the same upstream version). A changed package then
// fails loudly here, naming what changed, instead of silently changing what
// the tests run against.
package debfetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Pin names one build of one Debian package.
type Pin struct {
	Package string
	Version string
	// Arch is the GOARCH whose .deb SHA256 is ("amd64"); empty for an
	// "Architecture: all" package, the same file on every machine.
	Arch string
	// SHA256 is the .deb's hex SHA-256, as `apt-cache show
	// Package=Version` gives it (field SHA256).
	SHA256 string
}

func (p Pin) String() string { return p.Package + "=" + p.Version }

// Errors Fetch wraps, for callers that treat "cannot fetch here" (skip)
// apart from "fetched something else" (fail).
var (
	// ErrNoTool: this machine has no apt-get or no dpkg-deb.
	ErrNoTool = errors.New("apt-get or dpkg-deb missing")
	// ErrNoPin: a pin is for another architecture than this machine's.
	ErrNoPin = errors.New("no pin for this machine's architecture")
	// ErrDownload: `apt-get download` failed: no reachable mirror, or the
	// pinned version is no longer in the index.
	ErrDownload = errors.New("apt-get download failed")
	// ErrMismatch: a downloaded .deb's SHA-256 is not its pin's.
	ErrMismatch = errors.New("SHA-256 differs from the pin")
)

// DefaultTimeout bounds a fetch (download and unpack) and the wait for
// another process's fetch when Options.Timeout is zero: a machine without a
// reachable mirror should skip soon, not hang.
const DefaultTimeout = 3 * time.Minute

// MarkerFile is the file, in a fetched tree, that holds the SHA-256 of
// each .deb the tree was unpacked from, one a line in the pins' order.
const MarkerFile = ".deb-sha256"

// Options tune a fetch.
type Options struct {
	// Want are paths, relative to the tree, that a good unpack holds; a
	// cached tree without one of them is fetched again, and a fresh
	// unpack without one is an error.
	Want []string
	// Timeout bounds the download and unpack, and separately the wait
	// for another process's fetch; zero means DefaultTimeout.
	Timeout time.Duration
	// Step, when set, is called as a download starts with what is
	// fetched, and its result with the fetch's outcome (the signature of
	// kubebuild.Progress.Step). Fetch itself prints nothing.
	Step func(what string) func(error)
}

// Fetch makes dir hold the pinned packages unpacked together (a later
// pin's file replaces an earlier one's at the same path), fetching them
// unless dir already holds exactly these pins. Nothing is installed. Errors
// name the package, the version and, for a changed package, both hashes;
// they wrap ErrNoTool, ErrNoPin, ErrDownload or ErrMismatch where one of
// those is the cause.
func Fetch(ctx context.Context, dir string, pins []Pin, opts Options) error {
	return fetch(ctx, dir, pins, opts, apt{tools: checkTools, download: aptDownload})
}

// apt is what fetch runs: the tools' check and the download (tests stand
// in for both; the unpack is always dpkg-deb's).
type apt struct {
	tools func() error
	// download writes each pin's .deb into dir.
	download func(ctx context.Context, dir string, pins []Pin) error
}

func fetch(ctx context.Context, dir string, pins []Pin, opts Options, a apt) error {
	if len(pins) == 0 {
		return fmt.Errorf("fetching into %s: no packages pinned", dir)
	}
	if err := checkPins(pins); err != nil {
		return err
	}
	if Cached(dir, pins, opts.Want) {
		return nil
	}
	if err := a.tools(); err != nil {
		return fmt.Errorf("fetching %s: %w", names(pins), err)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", dir, err)
	}
	unlock, err := Lock(ctx, dir+".lock", timeout)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", names(pins), err)
	}
	defer unlock()
	if Cached(dir, pins, opts.Want) {
		return nil // another process fetched them while we waited
	}
	end := func(error) {}
	if opts.Step != nil {
		end = opts.Step(fmt.Sprintf("apt-get download %s (nothing is installed) into %s", names(pins), dir))
	}
	fetchCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = replace(fetchCtx, dir, pins, opts.Want, a.download)
	end(err)
	return err
}

// checkPins refuses an incomplete pin and one for another architecture.
func checkPins(pins []Pin) error {
	for _, p := range pins {
		if p.Package == "" || p.Version == "" || len(p.SHA256) != 64 {
			return fmt.Errorf("pin %q=%q sha256 %q: a pin needs a package, a version and a 64-digit hex SHA-256", p.Package, p.Version, p.SHA256)
		}
		if p.Arch != "" && p.Arch != runtime.GOARCH {
			return fmt.Errorf("%s is pinned for %s, this machine is %s: add its SHA256 from `apt-cache show %s`: %w",
				p, p.Arch, runtime.GOARCH, p, ErrNoPin)
		}
	}
	return nil
}

func checkTools() error {
	var missing []string
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("this machine has no %s on PATH (Debian and Ubuntu have both): %w", strings.Join(missing, " and "), ErrNoTool)
	}
	return nil
}

// names lists the pins as apt-get takes them.
func names(pins []Pin) string {
	s := make([]string, len(pins))
	for i, p := range pins {
		s[i] = p.String()
	}
	return strings.Join(s, " ")
}

// Cached tells whether dir holds an unpack of exactly pins (its marker)
// with every wanted path.
func Cached(dir string, pins []Pin, want []string) bool {
	got, err := os.ReadFile(filepath.Join(dir, MarkerFile))
	if err != nil || strings.TrimSpace(string(got)) != marker(pins) {
		return false
	}
	for _, w := range want {
		if _, err := os.Lstat(filepath.Join(dir, w)); err != nil {
			return false
		}
	}
	return true
}

func marker(pins []Pin) string {
	s := make([]string, len(pins))
	for i, p := range pins {
		s[i] = strings.ToLower(p.SHA256)
	}
	return strings.Join(s, "\n")
}

// replace downloads, checks and unpacks pins in a temporary directory
// beside dir, and only then replaces dir with the result: a refused or
// failed fetch leaves dir as it was and nothing beside it.
func replace(ctx context.Context, dir string, pins []Pin, want []string, download func(context.Context, string, []Pin) error) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("creating a download directory beside %s: %w", dir, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	debDir := filepath.Join(tmp, "debs")
	if err := os.Mkdir(debDir, 0o755); err != nil {
		return err
	}
	if err := download(ctx, debDir, pins); err != nil {
		return err
	}
	debs, err := check(debDir, pins)
	if err != nil {
		return err
	}
	root := filepath.Join(tmp, "root")
	for i, deb := range debs {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			return fmt.Errorf("unpacking %s (dpkg-deb -x %s): %w: %s", pins[i], deb, err, Tail(out))
		}
	}
	for _, w := range want {
		if _, err := os.Lstat(filepath.Join(root, w)); err != nil {
			return fmt.Errorf("the unpacked %s hold no %s", names(pins), w)
		}
	}
	if err := os.WriteFile(filepath.Join(root, MarkerFile), []byte(marker(pins)+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the marker of %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the stale %s: %w", dir, err)
	}
	if err := os.Rename(root, dir); err != nil {
		return fmt.Errorf("moving the unpacked %s into %s: %w", names(pins), dir, err)
	}
	return nil
}

// aptDownload runs `apt-get download` once for all pins in dir (it writes
// into its working directory).
func aptDownload(ctx context.Context, dir string, pins []Pin) error {
	args := []string{"download"}
	for _, p := range pins {
		args = append(args, p.String())
	}
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%w)", err, ctxErr)
		}
		return fmt.Errorf("apt-get download %s: %w: %s (no reachable mirror, or a pinned version is no longer served: `apt-cache policy` names the one that is): %w",
			names(pins), err, Tail(out), ErrDownload)
	}
	return nil
}

// Tail is the end of a command's output, for an error (prombin's
// server errors use it too).
func Tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
