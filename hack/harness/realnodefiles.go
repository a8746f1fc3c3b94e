// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"os"
	"path/filepath"
)

// WriteFile replaces a file as the node's processes see it (its /run and
// /var/lib are its own), atomically: a process reading it meanwhile sees
// the old or the new content, never a part.
func (n *RealNode) WriteFile(path string, data []byte) error {
	return n.ns.do(func() error {
		tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
		if err != nil {
			return err
		}
		if _, err := tmp.Write(data); err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			return err
		}
		if err := tmp.Close(); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
		if err := os.Chmod(tmp.Name(), 0o600); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
		return os.Rename(tmp.Name(), path)
	})
}
