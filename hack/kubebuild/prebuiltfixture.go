// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What the prebuilt-binaries tests of this package and of hack/nodebuild
// share: a release archive, a set written with its SHA256SUMS, and a file
// server standing for the user's source.

// TarFile is one entry of Tgz.
type TarFile struct {
	Name string
	Mode int64
	Data []byte
}

// Tgz is a gzip'd tar of files, in order.
func Tgz(t testing.TB, files ...TarFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// WritePrebuiltSet writes files into dir and a SHA256SUMS listing them, the
// listed checksum of wrong (when not empty) replaced by another's.
func WritePrebuiltSet(t testing.TB, dir string, files map[string][]byte, wrong string) {
	t.Helper()
	var sums strings.Builder
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if name == wrong {
			sum = sha256.Sum256([]byte("something else"))
		}
		fmt.Fprintf(&sums, "%x  %s\n", sum, name)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ServePrebuilt serves dir over HTTP for the rest of t and makes it the
// prebuilt source (PrebuiltEnv, with the checksum file beside the set).
func ServePrebuilt(t testing.TB, dir string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	t.Setenv(PrebuiltEnv, srv.URL)
	t.Setenv(PrebuiltSumsEnv, "")
	return srv
}
