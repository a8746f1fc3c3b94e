// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// BinaryName is the hook's file name on the host; CDI specs name it by
// path (the plugin's --cdi-hook-path).
const BinaryName = "gpufrac-cdi-hook"

// Install copies the hook binary src into dir on the host, where the
// container runtime runs it. The copy is renamed into place, so a container
// created during an upgrade runs the old binary or the new one, never a
// half-written file; the image has no shell or cp to do this with.
func Install(src, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the hook directory %s: %w", dir, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("opening the hook binary %s: %w", src, err)
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(dir, "."+BinaryName+"-*")
	if err != nil {
		return "", fmt.Errorf("creating a temporary file in %s: %w", dir, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("writing the hook to %s: %w", tmp.Name(), err)
	}
	dst := filepath.Join(dir, BinaryName)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("installing the hook as %s: %w", dst, err)
	}
	return dst, nil
}
