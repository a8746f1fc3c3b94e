// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Reads of the node's own files are bounded like any input's: a boot id is
// 37 bytes; a checkpoint holds at most a few thousand entries (MaxShares
// of a node) of about a KiB each, far below maxCheckpointBytes.
const (
	maxBootMarkerBytes = 4096
	maxCheckpointBytes = 64 << 20
)

// errTooLarge marks a file refused for its size before it was read.
var errTooLarge = errors.New("file too large")

// readBounded reads path whole unless it holds more than limit bytes,
// which is refused before anything is read (its size is what a stat says;
// a file growing meanwhile is cut at limit+1 and refused too).
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err == nil && fi.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, larger than %d bytes", path, errTooLarge, fi.Size(), limit)
	}
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, errTooLarge, limit)
	}
	return raw, nil
}
