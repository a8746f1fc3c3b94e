// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package record is the contract between gpufrac-cdi-hook, which writes a
// record of each container it set limits for, and the kubelet plugin,
// which reads them back (per-fraction metrics, MPS evictions, incidents):
// the record's fields, where it lives and how it is read. The hook's area
// (internal/hook) imports nothing of the plugin's; both import this.
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
)

// Record is what the hook leaves for the plugin's metrics: which container
// of which pod holds a claim's GPUs, and its cgroup.
type Record struct {
	ClaimUID  string   `json:"claimUID"`
	Namespace string   `json:"namespace"`
	Pod       string   `json:"pod"`
	Container string   `json:"container"`
	Cgroup    string   `json:"cgroup"`
	GPUs      []string `json:"gpus"`
	// Limits are what the hook set.
	Limits []hookarg.Limit `json:"limits,omitempty"`
}

// Path is where the record of a container of a claim lives.
func Path(dir, claimUID, containerID string) string {
	return filepath.Join(dir, claimUID, containerID+".json")
}

// MaxBytes bounds a record file as read back (by later hooks and the
// plugin's metrics): a record names one container and its limits on at
// most a node's GPUs, a few hundred bytes each.
const MaxBytes = 64 << 10

// ErrBad is a record file no hook wrote: too large or not a record.
var ErrBad = errors.New("not a container record")

// Read reads the record at path, refusing a link and anything larger
// than MaxBytes.
func Read(path string) (Record, error) {
	var r Record
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return r, fmt.Errorf("%w: %s is a symbolic link", ErrBad, path)
	}
	if err != nil {
		return r, err
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return r, err
	}
	if len(raw) > MaxBytes {
		return r, fmt.Errorf("%w: %s is larger than %d bytes", ErrBad, path, MaxBytes)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%w: %s: %w", ErrBad, path, err)
	}
	return r, nil
}
