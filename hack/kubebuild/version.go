// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// VersionEnv selects the Kubernetes release the harness builds and runs
// (control plane, and the kubelet of hack/nodebuild): one of Versions, empty
// meaning KubeVersion. `make test` runs the API-surface integration tests a
// second time with it set to the oldest supported release (the
// compatibility tier, docs/design/testing.md).
const VersionEnv = "GPUFRAC_KUBE_VERSION"

// CompatVersion is the oldest Kubernetes release gpufrac is tested against:
// the first whose defaults turn on every DRA feature gpufrac writes
// (DRAConsumableCapacity and DRADeviceTaints are beta and on by default from
// 1.36 in k8s.io/kubernetes' pkg/features/kube_features.go).
const CompatVersion = "v1.36.3"

// recipeModule is the directory under test/ of the build recipe of a
// release: hack/kube for the default one, hack/kube<major><minor> (made by
// `hack/kube/update-go-mod.sh <version>`) for the others. One function, not
// a package-level map, so that nothing can change the list at run time.
func recipeModule(version string) (string, bool) {
	switch version {
	case KubeVersion:
		return "kube", true
	case CompatVersion:
		return "kube136", true
	}
	return "", false
}

// Versions are the releases the harness can build, newest first.
func Versions() []string { return []string{KubeVersion, CompatVersion} }

// Selected is the release VersionEnv names, or KubeVersion when it is unset.
func Selected() (string, error) {
	v := strings.TrimSpace(os.Getenv(VersionEnv))
	if v == "" {
		return KubeVersion, nil
	}
	if _, ok := recipeModule(v); !ok {
		return "", fmt.Errorf("%s=%q: the harness has build recipes for %s only", VersionEnv, v, strings.Join(Versions(), " and "))
	}
	return v, nil
}

// RecipeDir is the build recipe module of version in the checkout at root
// (its kubelet recipe is the subdirectory kubelet).
func RecipeDir(root, version string) (string, error) {
	dir, ok := recipeModule(version)
	if !ok {
		return "", fmt.Errorf("no build recipe for Kubernetes %s (the harness has %s)", version, strings.Join(Versions(), " and "))
	}
	return filepath.Join(root, "hack", dir), nil
}

// LDFlagsFor are the version flags of version's binaries: clients (and
// kubectl version) see the real release instead of v0.0.0-master.
func LDFlagsFor(version string) string {
	minor := ""
	if parts := strings.Split(version, "."); len(parts) > 1 {
		minor = parts[1]
	}
	return strings.Join([]string{
		"-X k8s.io/component-base/version.gitVersion=" + version,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=" + minor,
		"-X k8s.io/component-base/version.gitTreeState=clean",
		"-s -w",
	}, " ")
}
