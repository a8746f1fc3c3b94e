// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package debfetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// check finds each pin's .deb in dir (apt-get names it
// package_version_arch.deb, the version's ':' escaped) and compares its
// SHA-256 with the pin, before anything is unpacked. It returns the files in
// the pins' order, or every difference at once.
func check(dir string, pins []Pin) ([]string, error) {
	debs := make([]string, len(pins))
	var errs []error
	for i, p := range pins {
		// A package name has no '_': the prefix is this package's only.
		found, _ := filepath.Glob(filepath.Join(dir, p.Package+"_*.deb"))
		if len(found) != 1 {
			errs = append(errs, fmt.Errorf("%s: apt-get download left %d .deb files named %s_*.deb, want 1", p, len(found), p.Package))
			continue
		}
		got, err := fileSHA256(found[0])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		if want := strings.ToLower(p.SHA256); got != want {
			errs = append(errs, fmt.Errorf("%s (%s) has SHA-256 %s, the pin says %s: Debian changed the package; "+
				"check the new build before moving the pin: %w", p, filepath.Base(found[0]), got, want, ErrMismatch))
			continue
		}
		debs[i] = found[0]
	}
	return debs, errors.Join(errs...)
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

// lockPoll is how often Lock tries the lock again. Polling with LOCK_NB,
// rather than a blocking flock in a goroutine, leaves nothing behind when
// the wait is given up.
const lockPoll = 100 * time.Millisecond

// Lock takes an exclusive flock on path (created if missing), waiting at
// most timeout, or until ctx ends, for another process to release it; the
// returned function releases it. Separate opens of path exclude each other
// in one process too.
func Lock(ctx context.Context, path string, timeout time.Duration) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the fetch lock %s: %w", path, err)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for another fetch to release %s: %w", path, context.Cause(ctx))
		case <-deadline.C:
			_ = f.Close()
			return nil, fmt.Errorf("another fetch held %s for over %s", path, timeout)
		case <-time.After(lockPoll):
		}
	}
}
