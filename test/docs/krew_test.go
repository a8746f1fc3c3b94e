// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin manifest (index.krew.dev,
// apiVersion krew.googlecontainertools.github.com/v1alpha2) that krew reads
// to install a plugin.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest: deployments/krew/gpufrac.yaml installs kubectl-gpufrac
// on linux and darwin, amd64 and arm64, each from its own release archive;
// the release step replaces RELEASE_VERSION and SHA256_<OS>_<ARCH>.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "deployments", "krew", "gpufrac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(raw, &p); err != nil {
		t.Fatalf("gpufrac.yaml: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		t.Errorf("apiVersion/kind = %s/%s, want krew.googlecontainertools.github.com/v1alpha2/Plugin", p.APIVersion, p.Kind)
	}
	// krew runs the plugin as kubectl-<name>.
	if p.Metadata.Name != "gpufrac" {
		t.Errorf("metadata.name = %q, want gpufrac (the binary is kubectl-gpufrac)", p.Metadata.Name)
	}
	if p.Spec.Version != "RELEASE_VERSION" && !regexp.MustCompile(`^v\d+\.\d+\.\d+`).MatchString(p.Spec.Version) {
		t.Errorf("spec.version = %q: krew needs a v-prefixed semantic version", p.Spec.Version)
	}
	if p.Spec.Homepage == "" || p.Spec.ShortDescription == "" || p.Spec.Description == "" {
		t.Error("spec.homepage, shortDescription and description are required by krew's index")
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	seen := map[string]bool{}
	for i, pl := range p.Spec.Platforms {
		osName, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		key := osName + "/" + arch
		if seen[key] {
			t.Errorf("platforms[%d]: %s twice", i, key)
		}
		seen[key] = true
		archive := "kubectl-gpufrac_" + p.Spec.Version + "_" + osName + "_" + arch + ".tar.gz"
		if want := "https://github.com/gpufrac/gpufrac/releases/download/" + p.Spec.Version + "/" + archive; pl.URI != want {
			t.Errorf("platforms[%d] (%s): uri %q, want %q", i, key, pl.URI, want)
		}
		placeholder := "SHA256_" + strings.ToUpper(osName) + "_" + strings.ToUpper(arch)
		if pl.Sha256 != placeholder && !hex.MatchString(pl.Sha256) {
			t.Errorf("platforms[%d] (%s): sha256 %q is neither the placeholder %s nor a SHA-256", i, key, pl.Sha256, placeholder)
		}
		if pl.Bin != "kubectl-gpufrac" {
			t.Errorf("platforms[%d] (%s): bin %q, want kubectl-gpufrac", i, key, pl.Bin)
		}
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !seen[want] {
			t.Errorf("no platform %s", want)
		}
	}
}
