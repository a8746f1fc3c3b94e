// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/ociimage"
)

// TestChartImageHasTheDockerfilesPaths: the image built without Docker puts
// each binary `make build` builds (one per cmd/ directory) where the
// Dockerfile copies it, /usr/local/bin/<binary>, with its ENTRYPOINT and
// USER, and every shared library the binaries load, the dynamic loader
// included, at the path the binary asks for it (what distroless's glibc
// gives the published image).
func TestChartImageHasTheDockerfilesPaths(t *testing.T) {
	needLDD(t)
	root, err := kubebuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	df, err := ParseDockerfile(filepath.Join(root, "deployments", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	// A dynamically linked host program stands in for each binary: what
	// matters here is where it lands and what it needs.
	stand, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(stand)
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	var built []string
	for _, c := range cmds {
		if c.IsDir() {
			built = append(built, c.Name())
			if err := os.WriteFile(filepath.Join(binDir, c.Name()), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	img, err := ChartImage(context.Background(), df, binDir, "0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	layer, err := ociimage.Layer(img)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(hdr.Name, "/")] = hdr
	}
	for _, name := range built {
		want := "/usr/local/bin/" + name
		if df.Copies[name] != want {
			t.Errorf("the Dockerfile copies %s to %q, want %s", name, df.Copies[name], want)
		}
		if hdr := files[want]; hdr == nil || hdr.Mode&0o111 == 0 {
			t.Errorf("the image has no executable %s: %+v", want, hdr)
		}
	}
	if len(df.Copies) != len(built) {
		t.Errorf("the Dockerfile copies %v; make build builds %v", df.Copies, built)
	}
	f, err := elf.Open(stand)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			raw, _ := io.ReadAll(p.Open())
			interp := strings.TrimRight(string(raw), "\x00")
			if files[interp] == nil {
				t.Errorf("the image lacks the binaries' dynamic loader %s", interp)
			}
		}
	}
	needed, _ := f.ImportedLibraries()
	for _, lib := range needed {
		found := false
		for p := range files {
			found = found || filepath.Base(p) == lib
		}
		if !found {
			t.Errorf("the image lacks %s, which the binaries need", lib)
		}
	}
	if !slices.Equal(img.Entrypoint, df.Entrypoint) || img.User != df.User || df.User == "" || len(df.Entrypoint) == 0 {
		t.Errorf("image entrypoint %v user %q; the Dockerfile's are %v %q", img.Entrypoint, img.User, df.Entrypoint, df.User)
	}
	if files["/etc/passwd"] == nil || files["/tmp"] == nil || files["/tmp"].Mode&0o1777 != 0o1777 {
		t.Errorf("the image lacks distroless's /etc/passwd or a world-writable /tmp")
	}
}

// TestParseDockerfileRefusesNoCopies: a Dockerfile whose final stage copies
// no binary is an error naming the file.
func TestParseDockerfileRefusesNoCopies(t *testing.T) {
	file := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(file, []byte("FROM a AS build\nCOPY --from=build /out/x /usr/local/bin/x\nFROM b\nUSER 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDockerfile(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("got %v, want an error naming %s", err, file)
	}
}
