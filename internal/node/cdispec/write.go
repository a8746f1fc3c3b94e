// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Spec files are written here, not by the CDI library's Cache.WriteSpec:
// the library (v1.1.2, pkg/cdi spec.go write) names its temp file
// "spec.*.tmp", like every other producer using it in the shared CDI
// directory, and leaves it behind when the write itself fails (a full
// disk), so neither the failed write nor a later start could tell gpufrac's
// leftovers from another producer's in-flight file. Here the temp file is
// named after the claim's spec, removed at once when anything fails, and
// any of gpufrac's left by a crash is removed at start (RemoveLeftovers).

// tempInfix marks this package's temp files: "<spec name>.tmp-<random>".
const tempInfix = ".tmp-"

// maxSpecBytes bounds what is read back of a spec: one claim's spec is a
// few KiB; anything far larger is not one of ours as written.
const maxSpecBytes = 1 << 20

// writeSpec writes spec as the file of claimUID atomically: a temp file
// in the same directory, checked by the CDI library as a runtime would
// read it (cdi.ReadSpec validates), then renamed into place; no fsync (see
// Write). Whatever fails, the temp file goes.
func (w *Writer) writeSpec(spec *cdispec.Spec, claimUID types.UID) (err error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encoding CDI spec: %w", err)
	}
	path := w.Path(claimUID)
	tmp, err := os.CreateTemp(w.dir, filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return fmt.Errorf("creating a temp file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(raw)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if _, err = cdi.ReadSpec(tmp.Name(), 0); err != nil {
		return fmt.Errorf("CDI spec of claim %s refused by the CDI library: %w", claimUID, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

// SpecState is what Check found of a claim's spec file.
type SpecState int

const (
	// SpecOK means the file is there and the CDI library reads it.
	SpecOK SpecState = iota
	// SpecMissing means no file.
	SpecMissing
	// SpecUnreadable means a file that does not parse or validate as a CDI
	// spec (torn, truncated, edited, or far too large to be ours).
	SpecUnreadable
)

// Check reads the spec of a claim back as a container runtime would (the
// CDI library's parser and validation), bounded, and says whether it is
// there and readable; the error is set for SpecUnreadable (why) and for
// failures to look at all (state SpecOK then means nothing).
func (w *Writer) Check(claimUID types.UID) (SpecState, error) {
	path := w.Path(claimUID)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return SpecMissing, nil
	case errors.Is(err, syscall.ELOOP):
		return SpecUnreadable, fmt.Errorf("%s is a symbolic link", path)
	case err != nil:
		return SpecOK, fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, maxSpecBytes+1))
	if err != nil {
		return SpecOK, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(raw) > maxSpecBytes {
		return SpecUnreadable, fmt.Errorf("%s is larger than %d bytes", path, maxSpecBytes)
	}
	parsed, err := cdi.ParseSpec(raw)
	if err == nil && (parsed == nil || parsed.Kind != Kind) {
		err = fmt.Errorf("kind is not %s", Kind)
	}
	if err != nil {
		return SpecUnreadable, fmt.Errorf("%s: %w", path, err)
	}
	return SpecOK, nil
}

// RemoveLeftovers removes the temp files of spec writes a crash
// interrupted: this package's ("<spec>.tmp-*"), and those the CDI
// library's writer of earlier releases left ("spec.*.tmp") whose content
// shows gpufrac's kind; another producer's temp files are kept. What
// cannot be removed is logged: leftovers cost space, not correctness.
func (w *Writer) RemoveLeftovers(logger klog.Logger) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		logger.Error(err, "Listing the CDI directory for leftover temp files", "dir", w.dir)
		return
	}
	prefix := strings.TrimSuffix(SpecName("X"), "X.json")
	for _, e := range entries {
		name := e.Name()
		ours := strings.HasPrefix(name, prefix) && strings.Contains(name, ".json"+tempInfix)
		if !ours && strings.HasPrefix(name, "spec.") && strings.HasSuffix(name, ".tmp") {
			ours = w.holdsOurKind(filepath.Join(w.dir, name))
		}
		if !ours || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(w.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			logger.Error(err, "Removing a leftover temp file of a CDI spec write", "path", filepath.Join(w.dir, name))
			continue
		}
		logger.Info("Removed a leftover temp file of an interrupted CDI spec write", "path", filepath.Join(w.dir, name))
	}
}

// holdsOurKind tells whether the file begins as a spec of gpufrac's kind
// does (json.Marshal writes cdiVersion, then kind).
func (w *Writer) holdsOurKind(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	return bytes.Contains(head[:n], []byte(`"kind":"`+Kind+`"`))
}
