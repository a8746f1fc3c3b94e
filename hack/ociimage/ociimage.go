// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package ociimage writes a container image as an OCI image layout archive
// (one uncompressed layer, its config, a manifest, index.json, oci-layout),
// which `ctr images import` reads. The end-to-end node has no registry: its
// pod and sandbox image is made on the spot from static binaries.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"
)

// File is one regular file of the image.
type File struct {
	// Path is absolute inside the image.
	Path string
	Mode int64
	Data []byte
}

// Image is what goes into the archive.
type Image struct {
	// Name is the full reference containerd stores the image under, e.g.
	// "gpufrac.dev/e2e:v1".
	Name       string
	Files      []File
	Dirs       []string // extra empty directories, e.g. /tmp
	Entrypoint []string
	Env        []string
	// User is the image's default user ("uid:gid"); empty is root.
	User string
	// ModTime is every archive entry's mtime; zero means the Unix epoch.
	// Releases set it to the commit's time (SOURCE_DATE_EPOCH).
	ModTime time.Time
}

// mtime is the archives' mtime for img: fixed, so that archives are
// reproducible.
func (img Image) mtime() time.Time {
	if img.ModTime.IsZero() {
		return epoch
	}
	return img.ModTime.UTC().Truncate(time.Second)
}

// Media types of the OCI image spec.
const (
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform of a manifest in the index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest is an image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is index.json.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []Descriptor `json:"manifests"`
}

type config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Env        []string `json:"Env,omitempty"`
		User       string   `json:"User,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// Write writes img as an OCI layout tar archive for arch (GOARCH names).
func Write(w io.Writer, img Image, arch string) error {
	layer, err := Layer(img)
	if err != nil {
		return err
	}
	layerDesc := describe(MediaTypeLayer, layer)
	var cfg config
	cfg.Architecture, cfg.OS = arch, "linux"
	cfg.Config.Entrypoint, cfg.Config.Env, cfg.Config.User = img.Entrypoint, img.Env, img.User
	cfg.RootFS.Type = "layers"
	// Uncompressed: the layer's digest is its diff ID.
	cfg.RootFS.DiffIDs = []string{layerDesc.Digest}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgDesc := describe(MediaTypeConfig, cfgJSON)
	manifest, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: cfgDesc, Layers: []Descriptor{layerDesc}})
	if err != nil {
		return err
	}
	manDesc := describe(MediaTypeManifest, manifest)
	tag := img.Name[strings.LastIndex(img.Name, ":")+1:]
	manDesc.Annotations = map[string]string{
		// What ctr import names the image by.
		"io.containerd.image.name":          img.Name,
		"org.opencontainers.image.ref.name": tag,
	}
	manDesc.Platform = &Platform{Architecture: arch, OS: "linux"}
	index, err := json.Marshal(Index{SchemaVersion: 2, MediaType: "application/vnd.oci.image.index.v1+json", Manifests: []Descriptor{manDesc}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer},
		{blobPath(cfgDesc), cfgJSON},
		{blobPath(manDesc), manifest},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: img.mtime()}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: img.mtime()}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// epoch is the mtime of an image without one.
var epoch = time.Unix(0, 0)

func describe(mediaType string, data []byte) Descriptor {
	sum := sha256.Sum256(data)
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d Descriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}

// Layer renders the image's files as one uncompressed layer tar, parents
// first, in a stable order.
func Layer(img Image) ([]byte, error) {
	dirs := map[string]bool{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range img.Dirs {
		if !path.IsAbs(d) {
			return nil, fmt.Errorf("image directory %q is not absolute", d)
		}
		dirs[path.Clean(d)] = true
		addParents(path.Clean(d))
	}
	files := slices.Clone(img.Files)
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("image file %q is not absolute", f.Path)
		}
		addParents(path.Clean(f.Path))
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	slices.Sort(dirList) // a parent sorts before its children
	for _, d := range dirList {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode, ModTime: img.mtime()}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path.Clean(f.Path), "/"), Mode: f.Mode, Size: int64(len(f.Data)), ModTime: img.mtime()}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
