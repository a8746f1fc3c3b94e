// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodebuild

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// tgz is a gzip'd tar of executables.
func tgz(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var entries []kubebuild.TarFile
	for name, data := range files {
		entries = append(entries, kubebuild.TarFile{Name: name, Mode: 0o755, Data: data})
	}
	return kubebuild.Tgz(t, entries...)
}

// TestPrebuiltNode: the node's pieces come from a served prebuilt set as
// their projects publish them (containerd's archive with bin/, runc as
// runc.<arch>, the CNI plugins' archive, the kubelet as a plain file), and a
// changed containerd archive is refused by name.
func TestPrebuiltNode(t *testing.T) {
	bin := func(name string) []byte { return []byte("#!/bin/sh\necho " + name + "\n") }
	served := map[string][]byte{
		Kubelet:                  bin(Kubelet),
		"runc." + runtime.GOARCH: bin(Runc),
		"containerd-2.4.2-linux.tar.gz": tgz(t, map[string][]byte{"bin/" + Containerd: bin(Containerd),
			"bin/" + Ctr: bin(Ctr), "bin/" + Shim: bin(Shim)}),
		"cni-plugins-linux-v1.9.1.tgz": tgz(t, map[string][]byte{"./" + Loopback: bin(Loopback), "./" + Tap: bin(Tap),
			"./" + HostLocal: bin(HostLocal), "./" + PTP: bin(PTP)}),
	}
	dir := t.TempDir()
	kubebuild.WritePrebuiltSet(t, dir, served, "")
	kubebuild.ServePrebuilt(t, dir)
	got, err := Ensure(context.Background(), Options{CacheDir: filepath.Join(t.TempDir(), "node-test")})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Kubelet, Containerd, Ctr, Shim, Runc, Loopback, Tap, HostLocal, PTP} {
		if data, err := os.ReadFile(got.Paths[name]); err != nil || !bytes.Equal(data, bin(name)) {
			t.Errorf("%s = %q (%v), want the served one", name, data, err)
		}
	}

	// Someone else's containerd under the same name: refused.
	if err := os.WriteFile(filepath.Join(dir, "containerd-2.4.2-linux.tar.gz"), tgz(t, map[string][]byte{"bin/" + Containerd: []byte("other")}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Ensure(context.Background(), Options{CacheDir: filepath.Join(t.TempDir(), "node-test")})
	if err == nil || !strings.Contains(err.Error(), "containerd-2.4.2-linux.tar.gz") || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("Ensure with a changed containerd archive: %v, want a refusal naming it", err)
	}
}
