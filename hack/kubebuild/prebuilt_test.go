// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// prebuiltFixture writes a prebuilt set into dir as a user would have it:
// etcd inside its release archive (with a non-executable README beside
// it), the control plane's binaries as plain files, and SHA256SUMS listing
// them, with the listed checksum of file wrong replaced by another. It
// returns each binary's contents by name.
func prebuiltFixture(t *testing.T, dir, wrong string) map[string][]byte {
	t.Helper()
	bins := map[string][]byte{}
	for _, name := range []string{Etcd, KubeAPIServer, KubeScheduler, KubeControllerMgr} {
		bins[name] = []byte("#!/bin/sh\necho " + name + " fixture\n")
	}
	files := map[string][]byte{"etcd-v3.6.0-linux-amd64.tar.gz": Tgz(t,
		TarFile{Name: "etcd-v3.6.0-linux-amd64/README.md", Mode: 0o644, Data: []byte("readme")},
		TarFile{Name: "etcd-v3.6.0-linux-amd64/etcd", Mode: 0o755, Data: bins[Etcd]})}
	for _, name := range []string{KubeAPIServer, KubeScheduler, KubeControllerMgr} {
		files[name] = bins[name]
	}
	WritePrebuiltSet(t, dir, files, wrong)
	return bins
}

// TestPrebuiltFromURL: with GPUFRAC_KUBE_BINARIES naming a file server,
// Ensure installs the served binaries (etcd out of its archive) once every
// checksum matches, and builds nothing.
func TestPrebuiltFromURL(t *testing.T) {
	served := t.TempDir()
	bins := prebuiltFixture(t, served, "")
	srv := ServePrebuilt(t, served)
	t.Setenv(PrebuiltEnv, srv.URL+"/") // a trailing slash works too
	cache := filepath.Join(t.TempDir(), "kube-test")
	var progress bytes.Buffer
	got, err := Ensure(context.Background(), Options{CacheDir: cache, Progress: &progress})
	if err != nil {
		t.Fatalf("Ensure: %v\n%s", err, progress.String())
	}
	for name, want := range bins {
		data, err := os.ReadFile(got[name])
		if err != nil || !bytes.Equal(data, want) {
			t.Errorf("%s = %q (%v), want the served %q", name, data, err, want)
		}
		if st, err := os.Stat(got[name]); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable (%v)", name, err)
		}
	}
	if strings.Contains(progress.String(), "module proxy") {
		t.Errorf("Ensure built from the module proxy:\n%s", progress.String())
	}
	// The checksum file is read on every run (the set it names is cached by
	// its hash), so a source that went away is an error, not a silent reuse.
	srv.Close()
	if _, err := Ensure(context.Background(), Options{CacheDir: cache}); err == nil || !strings.Contains(err.Error(), "SHA256SUMS") {
		t.Errorf("Ensure with the server gone: %v, want the checksum file's fetch to fail (it is read every run)", err)
	}
}

// TestPrebuiltMismatchIsRefused: one file whose SHA-256 is not the listed
// one refuses the whole set, naming the file, and installs nothing.
func TestPrebuiltMismatchIsRefused(t *testing.T) {
	served := t.TempDir()
	prebuiltFixture(t, served, KubeScheduler)
	srv := ServePrebuilt(t, served)
	cache := filepath.Join(t.TempDir(), "kube-test")
	_, err := Ensure(context.Background(), Options{CacheDir: cache})
	if err == nil {
		t.Fatal("Ensure accepted a binary whose checksum does not match")
	}
	for _, want := range []string{srv.URL + "/" + KubeScheduler, "SHA-256", srv.URL + "/SHA256SUMS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	for _, name := range []string{Etcd, KubeScheduler, KubeAPIServer} {
		if _, err := os.Stat(filepath.Join(cache, name)); err == nil {
			t.Errorf("%s was installed from a refused set", name)
		}
	}
}

// TestPrebuiltFromDirectory: a directory works as the source, with the
// checksum file elsewhere (GPUFRAC_KUBE_BINARIES_SHA256SUMS); a set that
// has some of a group's binaries but not all is refused, naming the missing.
func TestPrebuiltFromDirectory(t *testing.T) {
	dir := t.TempDir()
	bins := prebuiltFixture(t, dir, "")
	sums := filepath.Join(t.TempDir(), "my-sums")
	raw, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sums, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "SHA256SUMS")); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PrebuiltEnv, dir)
	t.Setenv(PrebuiltSumsEnv, sums)
	got, err := Ensure(context.Background(), Options{CacheDir: filepath.Join(t.TempDir(), "kube-test")})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(got[KubeAPIServer]); !bytes.Equal(data, bins[KubeAPIServer]) {
		t.Errorf("kube-apiserver = %q, want the directory's", data)
	}

	var partial []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasSuffix(line, "  "+KubeControllerMgr) {
			partial = append(partial, line)
		}
	}
	if err := os.WriteFile(sums, []byte(strings.Join(partial, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Ensure(context.Background(), Options{CacheDir: filepath.Join(t.TempDir(), "kube-test")})
	if err == nil || !strings.Contains(err.Error(), "not "+KubeControllerMgr) {
		t.Errorf("Ensure with kube-controller-manager missing from the set: %v, want it named", err)
	}
}

// TestPrebuiltSwitchOff: without the switch nothing is taken from anywhere.
func TestPrebuiltSwitchOff(t *testing.T) {
	t.Setenv(PrebuiltEnv, "")
	done, err := UsePrebuilt(context.Background(), NewProgress(nil), t.TempDir(), "etcd", []string{Etcd})
	if done || err != nil {
		t.Errorf("UsePrebuilt without %s = %v, %v; want false, nil (build from the module proxy)", PrebuiltEnv, done, err)
	}
}
