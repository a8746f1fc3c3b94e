// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestArchiveIsAConsistentLayout reads the archive back as ctr import does:
// index → manifest → config and layer, every blob under its own digest.
func TestArchiveIsAConsistentLayout(t *testing.T) {
	img := Image{Name: "gpufrac.dev/e2e:v1", Entrypoint: []string{"/pause"}, Dirs: []string{"/tmp"},
		Files: []File{{Path: "/bin/probe", Mode: 0o755, Data: []byte("probe")}, {Path: "/pause", Mode: 0o755, Data: []byte("pause")}}}
	var buf bytes.Buffer
	if err := Write(&buf, img, "amd64"); err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if name, ok := strings.CutPrefix(hdr.Name, "blobs/sha256/"); ok && name != "" {
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != name {
				t.Errorf("blob %s has digest %x", name, sum)
			}
		}
		blobs[hdr.Name] = data
	}
	var index Index
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %+v", err, index)
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != img.Name {
		t.Errorf("image name %q, want %q", got, img.Name)
	}
	var m Manifest
	if err := json.Unmarshal(blobs[blobPath(index.Manifests[0])], &m); err != nil {
		t.Fatal(err)
	}
	layer := blobs[blobPath(m.Layers[0])]
	var names []string
	lr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := lr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	if want := "bin/ tmp/ bin/probe pause"; strings.Join(names, " ") != want {
		t.Errorf("layer entries %q, want %q", strings.Join(names, " "), want)
	}
	if !strings.Contains(string(blobs[blobPath(m.Config)]), `"diff_ids":["`+m.Layers[0].Digest+`"]`) {
		t.Errorf("config does not name the layer: %s", blobs[blobPath(m.Config)])
	}
}
