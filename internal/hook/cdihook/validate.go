// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/safetext"
)

// Container IDs as runtimes make them (containerd and CRI-O: 64 hex
// digits; runc accepts letters, digits and _ + - .): the ID names a record
// file, so nothing that could climb out of the record directory passes.
var containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_+.-]{0,127}$`)

// ValidateContainerID refuses an OCI state whose container ID could not be
// a file name.
func ValidateContainerID(id string) error {
	if !containerIDPattern.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("OCI state: container id %q is not an id a runtime makes (letters, digits, _ + - ., at most 128)", safetext.Cap(id, 160))
	}
	return nil
}

// claimUIDPattern is a Kubernetes UID (a UUID in practice).
var claimUIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateClaimUID refuses a --claim that could not be a claim's UID; empty
// means no record is wanted.
func ValidateClaimUID(uid string) error {
	if uid != "" && !claimUIDPattern.MatchString(uid) {
		return fmt.Errorf("--claim %q: not a ResourceClaim UID (lowercase letters, digits and -, at most 63)", safetext.Cap(uid, 160))
	}
	return nil
}

// ValidateRecordDir refuses a --record-dir the hook could resolve against
// its working directory (the runtime's, not the plugin's) or that walks
// up: the plugin writes an absolute, clean path into every CDI spec.
func ValidateRecordDir(dir string) error {
	if dir != "" && (!filepath.IsAbs(dir) || filepath.Clean(dir) != dir) {
		return fmt.Errorf("--record-dir %q: must be an absolute path without . or .. elements", safetext.Cap(dir, 160))
	}
	return nil
}

// checkCgroupPath makes sure the cgroup read from /proc names a cgroup
// below the root, not the root itself (limits there would bind the whole
// node) and not a path a ".." took elsewhere, both as written and where
// its links lead: a link below the root may lead to the root or out of it.
func checkCgroupPath(root, path, from string) error {
	root = filepath.Clean(root)
	if !strictlyBelow(root, path) {
		return fmt.Errorf("%s names cgroup %s, which is not a cgroup below %s: refusing to set limits there", from, path, root)
	}
	realRoot, err := resolveExisting(root)
	if err != nil {
		return fmt.Errorf("%s: resolving %s: %w", from, root, err)
	}
	realPath, err := resolveExisting(path)
	if err != nil {
		return fmt.Errorf("%s: resolving cgroup %s: %w", from, path, err)
	}
	if !strictlyBelow(realRoot, realPath) {
		return fmt.Errorf("%s names cgroup %s, which leads to %s, which is not a cgroup below %s: refusing to set limits there", from, path, realPath, realRoot)
	}
	return nil
}

// resolveExisting resolves the links of path's longest existing prefix
// and keeps the rest as written: a cgroup path is checked before NVML
// looks at it, and on a simulated node it may not exist at all.
func resolveExisting(path string) (string, error) {
	path = filepath.Clean(path)
	resolved, err := filepath.EvalSymlinks(path)
	if err == nil {
		return resolved, nil
	}
	parent := filepath.Dir(path)
	if !errors.Is(err, fs.ErrNotExist) || parent == path {
		return "", err
	}
	realParent, err := resolveExisting(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(realParent, filepath.Base(path)), nil
}

// strictlyBelow tells whether path (made absolute and clean) lies inside
// dir and is not dir itself.
func strictlyBelow(dir, path string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// MaxStateBytes bounds the OCI state read from stdin. The state is the
// container's id, status, pid, bundle path and annotations; Kubernetes
// caps an object's annotations at 256 KiB (documented: apimachinery's
// TotalAnnotationSizeLimitB) and runtimes add a few of their own, so a
// state sixteen times that is not one a runtime wrote (inferred).
const MaxStateBytes = 4 << 20

// ErrStateTooLarge is returned for stdin past MaxStateBytes.
var ErrStateTooLarge = fmt.Errorf("the OCI state on stdin is larger than %d bytes (4 MiB); a runtime's state is far smaller, refusing to read more", MaxStateBytes)

// limitedReader fails, rather than ends, once more than n bytes were
// asked of it: a state cut at the limit must not parse as a shorter one.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, ErrStateTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, err
}

// resolveRecordPath is RecordPath, resolved: the claim's directory is
// created if need be and must resolve (symbolic links followed) to a
// directory inside recordDir's own resolution, so neither the IDs nor a
// link planted under the directory sends the record elsewhere.
func resolveRecordPath(recordDir, claimUID, containerID string) (string, error) {
	path := record.Path(recordDir, claimUID, containerID)
	if !strictlyBelow(recordDir, path) {
		return "", fmt.Errorf("record path %s is not inside %s", path, recordDir)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", err
	}
	realDir, err := filepath.EvalSymlinks(recordDir)
	if err != nil {
		return "", err
	}
	realClaimDir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return "", err
	}
	if realClaimDir != filepath.Join(realDir, claimUID) {
		return "", fmt.Errorf("record directory %s resolves to %s, outside %s: refusing to write there", filepath.Dir(path), realClaimDir, realDir)
	}
	return filepath.Join(realClaimDir, filepath.Base(path)), nil
}

// writeFileNoFollow writes raw to a new or truncated path that is not a
// symbolic link.
func writeFileNoFollow(path string, raw []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(raw)
	return errors.Join(err, f.Close())
}
