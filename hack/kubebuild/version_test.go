// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryVersionHasItsRecipe: each release the harness offers has a
// control-plane and a kubelet recipe in the checkout that require exactly
// that release (update-go-mod.sh wrote them), and the ldflags name it.
func TestEveryVersionHasItsRecipe(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Versions() {
		dir, err := RecipeDir(root, v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		for _, mod := range []string{filepath.Join(dir, "go.mod"), filepath.Join(dir, "kubelet", "go.mod")} {
			data, err := os.ReadFile(mod)
			if err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			// go mod tidy lists it among the requirements (indirect: the
			// module requires it for its tool lines).
			if !regexp.MustCompile(`(?m)^(require)?\s+k8s\.io/kubernetes ` + regexp.QuoteMeta(v) + `( |$)`).Match(data) {
				t.Errorf("%s does not require k8s.io/kubernetes %s", mod, v)
			}
		}
		minor := strings.Split(v, ".")[1]
		if f := LDFlagsFor(v); !strings.Contains(f, "gitVersion="+v+" ") || !strings.Contains(f, "gitMinor="+minor+" ") {
			t.Errorf("LDFlagsFor(%s) = %q", v, f)
		}
	}
	if LDFlags() != LDFlagsFor(KubeVersion) {
		t.Error("LDFlags is not the default release's")
	}
}

func TestSelectedFollowsTheEnvironment(t *testing.T) {
	for env, want := range map[string]string{"": KubeVersion, CompatVersion: CompatVersion, " " + KubeVersion + " ": KubeVersion} {
		t.Setenv(VersionEnv, env)
		if got, err := Selected(); err != nil || got != want {
			t.Errorf("%s=%q: got %q, %v; want %s", VersionEnv, env, got, err, want)
		}
	}
	t.Setenv(VersionEnv, "v1.35.0")
	if _, err := Selected(); err == nil || !strings.Contains(err.Error(), "v1.37.2 and v1.36.3") {
		t.Errorf("an unknown release: got %v, want the releases offered", err)
	}
	dir, err := CacheDirFor(CompatVersion)
	if err != nil || filepath.Base(dir) != "kube-"+CompatVersion {
		t.Errorf("CacheDirFor(%s) = %s, %v", CompatVersion, dir, err)
	}
}
