// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// Prebuilt binaries: with PrebuiltEnv set, Ensure (and hack/nodebuild's)
// installs the binaries a user already has instead of building them from
// the module proxy, once every file the user's checksum file lists matches
// its SHA-256. The source is a directory or an http(s) URL holding the files
// and, unless PrebuiltSumsEnv names it elsewhere, SHA256SUMS (`sha256sum`
// output). A listed file is a binary named as the harness runs it (etcd,
// kube-apiserver, kubelet, runc; runc.amd64 as runc publishes it is taken
// too) or a .tar.gz/.tgz archive whose regular files with those base names
// are taken (etcd's and containerd's release archives). The versions must
// be the pinned ones (KubeVersion, hack/kube/etcd/go.mod, nodebuild's): the
// checksum file is the user's word for what the files are, and no
// checksum of upstream's is kept here.
const (
	PrebuiltEnv     = "GPUFRAC_KUBE_BINARIES"
	PrebuiltSumsEnv = "GPUFRAC_KUBE_BINARIES_SHA256SUMS"
)

// UsePrebuilt installs group's binaries (names) into cache from the
// prebuilt set when PrebuiltEnv is set and the set has them. It returns
// false when the switch is off or the set has none of them (the caller
// builds them), and an error when a file's checksum does not match or the
// set has only some of them.
func UsePrebuilt(ctx context.Context, p *Progress, cache, group string, names []string) (bool, error) {
	src := os.Getenv(PrebuiltEnv)
	if src == "" {
		return false, nil
	}
	set, err := prebuiltSet(ctx, p, filepath.Dir(cache), src)
	if err != nil {
		return false, err
	}
	var have, missing []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(set.dir, n)); err == nil {
			have = append(have, n)
		} else {
			missing = append(missing, n)
		}
	}
	switch {
	case len(have) == 0:
		p.Printf("%s: %s has no %s; building them from the module proxy\n", PrebuiltEnv, src, strings.Join(names, ", "))
		return false, nil
	case len(missing) > 0:
		return false, fmt.Errorf("%s=%s has %s but not %s (listed in %s, as a binary or inside a .tar.gz)",
			PrebuiltEnv, src, strings.Join(have, ", "), strings.Join(missing, ", "), set.sums)
	}
	stamp := filepath.Join(cache, "."+group+".recipe")
	if old, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(old)) == set.key {
		return true, nil
	}
	for _, n := range names {
		if err := copyExecutable(filepath.Join(set.dir, n), filepath.Join(cache, n)); err != nil {
			return false, err
		}
	}
	p.Printf("Installed prebuilt %s from %s (SHA-256 checked against %s)\n", strings.Join(names, ", "), src, set.sums)
	// The stamp is not the build recipe's: a later run without the switch
	// builds from the module proxy again.
	return true, os.WriteFile(stamp, []byte(set.key+"\n"), 0o644)
}

// prebuilt is a verified set: its binaries in dir, keyed by the checksum
// file's hash.
type prebuilt struct {
	dir, key, sums string
}

// prebuiltSet fetches and checks every file the checksum file lists, once
// per checksum file and machine (under base/prebuilt-<hash>).
func prebuiltSet(ctx context.Context, p *Progress, base, src string) (*prebuilt, error) {
	sumsSrc := os.Getenv(PrebuiltSumsEnv)
	if sumsSrc == "" {
		sumsSrc = join(src, "SHA256SUMS")
	}
	raw, err := fetch(ctx, sumsSrc)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the checksum file: %w", PrebuiltEnv, err)
	}
	sums, err := parseSums(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sumsSrc, err)
	}
	h := sha256.Sum256(append([]byte(src+"\n"), raw...))
	set := &prebuilt{key: "prebuilt-" + hex.EncodeToString(h[:8]), sums: sumsSrc}
	set.dir = filepath.Join(base, set.key)
	if _, err := os.Stat(filepath.Join(set.dir, ".verified")); err == nil {
		return set, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lock(ctx, p, set.dir+".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(set.dir, ".verified")); err == nil {
		return set, nil
	}
	tmp := set.dir + ".partial"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for _, s := range sums {
		if err := verifyAndUnpack(ctx, join(src, s.name), s, sumsSrc, tmp); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".verified"), []byte(sumsSrc+"\n"), 0o644); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(set.dir)
	if err := os.Rename(tmp, set.dir); err != nil {
		return nil, err
	}
	return set, nil
}

// sum is one line of a checksum file.
type sum struct{ hex, name string }

func parseSums(raw []byte) ([]sum, error) {
	var out []sum
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		h, name, _ := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimSpace(name), "*")
		if _, err := hex.DecodeString(h); err != nil || len(h) != 64 || name == "" || strings.Contains(name, "..") {
			return nil, fmt.Errorf("line %d %q: want `<SHA-256 in hex>  <file name>` as sha256sum prints", i+1, line)
		}
		out = append(out, sum{hex: strings.ToLower(h), name: name})
	}
	if len(out) == 0 {
		return nil, errors.New("lists no file")
	}
	return out, nil
}

// verifyAndUnpack fetches one listed file, refuses it unless its SHA-256 is
// the listed one, and puts the binaries it holds into dir.
func verifyAndUnpack(ctx context.Context, from string, s sum, sumsSrc, dir string) error {
	data, err := fetch(ctx, from)
	if err != nil {
		return fmt.Errorf("%s: %w", PrebuiltEnv, err)
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != s.hex {
		return fmt.Errorf("%s: refusing %s: its SHA-256 is %x, %s lists %s for it",
			PrebuiltEnv, from, got, sumsSrc, s.hex)
	}
	base := path.Base(s.name)
	if strings.HasSuffix(base, ".tar.gz") || strings.HasSuffix(base, ".tgz") {
		return untarBinaries(data, from, dir)
	}
	return os.WriteFile(filepath.Join(dir, strings.TrimSuffix(base, "."+runtime.GOARCH)), data, 0o755)
}

// untarBinaries writes every regular file of a gzip'd tar into dir under
// its base name (etcd-v3.6.x-linux-amd64/etcd, bin/containerd).
func untarBinaries(data []byte, from, dir string) error {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		name := path.Base(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || hdr.FileInfo().Mode()&0o111 == 0 || name == "." || name == "/" {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", from, hdr.Name, err)
		}
	}
}

// fetch reads a local file or an http(s) URL.
func fetch(ctx context.Context, from string) ([]byte, error) {
	if !strings.HasPrefix(from, "http://") && !strings.HasPrefix(from, "https://") {
		return os.ReadFile(from)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, from, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", from, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// join appends a file name to a directory or URL.
func join(src, name string) string {
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		return strings.TrimSuffix(src, "/") + "/" + name
	}
	return filepath.Join(src, filepath.FromSlash(name))
}

// copyExecutable copies src to dst through a temporary file and a rename,
// so that a running copy of dst (another test's etcd) is never written to.
func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".prebuilt-tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
