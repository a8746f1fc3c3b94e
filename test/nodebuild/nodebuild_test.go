// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodebuild

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/test/kubebuild"
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

// TestRecipeKeysTheCache: what decides a build's output changes the stamp.
func TestRecipeKeysTheCache(t *testing.T) {
	b := &builder{goVersion: "go1.26.8"}
	var runc group
	for _, g := range groups(kubebuild.KubeVersion, "test/kube/kubelet") {
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
