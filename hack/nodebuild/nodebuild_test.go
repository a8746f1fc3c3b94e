// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodebuild

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// TestNoPkgConfigMakesRuncUnavailable: a machine without the tools to find
// libseccomp gets a reason to skip with, naming what to install, not a
// build failure.
func TestNoPkgConfigMakesRuncUnavailable(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findSeccomp(context.Background(), kubebuild.NewProgress(nil), t.TempDir())
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || !strings.Contains(unavailable.Reason, "apt-get install pkg-config libseccomp-dev") {
		t.Errorf("got %v, want an UnavailableError naming the packages", err)
	}
}

// TestSeccompFetchFailures: where the pinned libseccomp-dev cannot be
// fetched (no apt-get, no mirror) the node is unavailable, with what to
// install; a download that is not the pinned build is an error, not a
// reason to skip. apt-get and pkg-config are stand-ins on PATH (pkg-config
// knowing no system libseccomp); nothing is unpacked.
func TestSeccompFetchFailures(t *testing.T) {
	for _, tc := range []struct {
		name        string
		aptGet      string // the stand-in's script; empty: no apt-get
		unavailable bool
		mentions    []string
	}{
		{"no apt-get", "", true, []string{"no apt-get and dpkg-deb", "apt-get install libseccomp-dev"}},
		{"no mirror", "echo 'E: Failed to fetch' >&2; exit 100", true,
			[]string{seccompPin.String(), "Failed to fetch", "apt-get install libseccomp-dev"}},
		{"changed package", "echo changed > libseccomp-dev_2.5.4-1+deb12u1_amd64.deb", false,
			[]string{seccompPin.String(), seccompPin.SHA256, "SHA-256"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.unavailable && runtime.GOARCH != seccompPin.Arch {
				t.Skipf("the pin is %s's; this machine's fetch stops before downloading", seccompPin.Arch)
			}
			bin := t.TempDir()
			scripts := map[string]string{"pkg-config": "exit 1"}
			if tc.aptGet != "" {
				scripts["apt-get"], scripts["dpkg-deb"] = tc.aptGet, "exit 1"
			}
			for name, script := range scripts {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", bin)
			cache := t.TempDir()
			_, err := findSeccomp(context.Background(), kubebuild.NewProgress(nil), cache)
			var unavailable *UnavailableError
			if err == nil || errors.As(err, &unavailable) != tc.unavailable {
				t.Fatalf("got %v, want an error that is unavailable=%v", err, tc.unavailable)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("the error does not say %q: %v", m, err)
				}
			}
			if _, err := os.Stat(filepath.Join(cache, "libseccomp")); err == nil {
				t.Error("a failed fetch left an unpacked libseccomp")
			}
		})
	}
}

// TestRecipeKeysTheCache: what decides a build's output changes the stamp.
func TestRecipeKeysTheCache(t *testing.T) {
	b := &builder{goVersion: "go1.26.8"}
	var runc group
	for _, g := range groups(kubebuild.KubeVersion, "hack/kube/kubelet") {
		if g.name == "runc" {
			runc = g
		}
	}
	base, err := b.recipe(runc, &seccompLib{version: "deb-2.5.4"})
	if err != nil {
		t.Fatal(err)
	}
	other := runc
	other.version = "v1.5.4"
	for name, recipe := range map[string]func() (string, error){
		"version":    func() (string, error) { return b.recipe(other, &seccompLib{version: "deb-2.5.4"}) },
		"libseccomp": func() (string, error) { return b.recipe(runc, &seccompLib{version: "system-2.6.0"}) },
		"go": func() (string, error) {
			return (&builder{goVersion: "go1.26.9"}).recipe(runc, &seccompLib{version: "deb-2.5.4"})
		},
	} {
		got, err := recipe()
		if err != nil || got == base {
			t.Errorf("changing the %s left the recipe %s (%v)", name, got, err)
		}
	}
}
