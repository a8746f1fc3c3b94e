// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entry is one regular file of an archive.
type entry struct {
	Name string
	Mode int64
	Data []byte
}

// tarGz renders entries as a gzip'd tar that depends on nothing but its
// contents and mtime: names sorted, every header's mtime mtime (whole
// seconds), owner 0:0 with no user or group names, the mode given (not the
// file's on disk), no directory entries, and a gzip header with neither a
// name nor a time (Go's writer leaves both empty and writes OS "unknown").
func tarGz(entries []entry, mtime time.Time) ([]byte, error) {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, e := range sorted {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.Name, Mode: e.Mode, Size: int64(len(e.Data)),
			ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("archiving %s: %w", e.Name, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sha256Hex is the hex SHA-256 of data.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// SumsFile renders sums (file name to hex SHA-256) as `sha256sum` prints
// them (two spaces between), sorted by name, so that `sha256sum -c
// SHA256SUMS` checks a download.
func SumsFile(sums map[string]string) []byte {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(sums)) {
		fmt.Fprintf(&b, "%s  %s\n", sums[name], name)
	}
	return []byte(b.String())
}

// ParseSums reads a SumsFile (or any `sha256sum` output; a leading `*`,
// sha256sum's binary-mode mark, is dropped).
func ParseSums(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimSpace(name), "*")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || name == "" {
			return nil, fmt.Errorf("line %d %q: want `<64 hex digits>  <file name>`", i+1, line)
		}
		out[path.Base(name)] = strings.ToLower(sum)
	}
	return out, nil
}

// writeFile writes an artefact with a fixed mode, whatever the umask.
func writeFile(dir, name string, data []byte) error {
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	return os.Chmod(file, 0o644)
}
