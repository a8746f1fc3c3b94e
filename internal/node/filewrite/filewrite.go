// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package filewrite replaces small files whole, so that no reader ever sees
// a torn file, and counts what it did to the disk. Two strengths exist, and
// callers choose per file (docs/reliability.md says which file gets which,
// and why):
//
//   - Atomic: temp file in the same directory, then rename over the target.
//     A killed process leaves the old file or the new one, never a mix: the
//     rename is atomic (rename(2), documented) and the page cache outlives
//     the process, so everything it wrote is seen by the next one.
//   - Durable: Atomic plus fsync of the temp file before the rename and of
//     the directory after it, so the new file also survives a power loss.
package filewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Counter counts file replacements and fsyncs. A nil *Counter counts
// nothing; each owner (a plugin, a benchmark) injects its own.
type Counter struct {
	writes atomic.Int64
	fsyncs atomic.Int64
}

// AddWrite counts one file replaced.
func (c *Counter) AddWrite() {
	if c != nil {
		c.writes.Add(1)
	}
}

// AddFsync counts one fsync (of a file or a directory).
func (c *Counter) AddFsync() {
	if c != nil {
		c.fsyncs.Add(1)
	}
}

// Writes is the number of files replaced so far.
func (c *Counter) Writes() int64 {
	if c == nil {
		return 0
	}
	return c.writes.Load()
}

// Fsyncs is the number of fsyncs so far.
func (c *Counter) Fsyncs() int64 {
	if c == nil {
		return 0
	}
	return c.fsyncs.Load()
}

// Atomic replaces path with raw: never torn after a process crash, not
// guaranteed to survive a power loss.
func Atomic(path string, raw []byte, perm os.FileMode, c *Counter) error {
	return replace(path, raw, perm, false, c)
}

// Durable replaces path with raw and returns once the new file and its
// directory entry are on stable storage.
func Durable(path string, raw []byte, perm os.FileMode, c *Counter) error {
	return replace(path, raw, perm, true, c)
}

func replace(path string, raw []byte, perm os.FileMode, durable bool, c *Counter) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating a temp file for %s: %w", path, err)
	}
	// Every syscall counts on the Prepare path (docs/benchmarks.md): the
	// temp file is removed only when the rename did not happen, and its
	// mode set only when CreateTemp's 0600 is not what was asked.
	renamed := false
	defer func() {
		if !renamed {
			_ = os.Remove(tmp.Name())
		}
	}()
	if perm != 0o600 {
		if err := tmp.Chmod(perm); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("setting the mode of %s: %w", tmp.Name(), err)
		}
	}
	if _, err := tmp.Write(raw); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
		}
		c.AddFsync()
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	renamed = true
	c.AddWrite()
	if !durable {
		return nil
	}
	// The rename is durable only once the directory entry is.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s: %w", dir, err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	c.AddFsync()
	return nil
}
