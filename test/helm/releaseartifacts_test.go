// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/gpufrac/gpufrac/hack/release"
)

const releaseVersion = "0.0.0-test"

// TestReleaseArtifacts runs `make release`'s tool (hack/cmd/release) twice
// for a dummy version into two directories and checks what a release
// publishes: both runs give byte-identical files (SHA256SUMS equal, and
// each file's SHA-256 the listed one); the chart package loads in Helm with
// that version and appVersion, holds what Helm reads from the chart
// directory, and installs on a harness control plane, its workloads naming
// the release's image; each image archive carries the binaries at the
// Dockerfile's paths, built for its architecture and stamped with the
// version, and its SBOM names the image and its modules; the krew
// manifest's checksums are those of the kubectl-gpufrac archives, each
// holding a binary for its platform. The arm64 image is built when the
// cross toolchain is at hand (GPUFRAC_CROSS_AARCH64 or the cache
// hack/cmd/release fills), as the test fetches nothing from Debian.
func TestReleaseArtifacts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every release artefact twice")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	arches := []string{"amd64"}
	if cross := crossRoot(); cross != "" {
		arches = append(arches, "arm64")
		t.Setenv(release.CrossEnv, cross)
	} else {
		t.Logf("no aarch64 cross toolchain here: the arm64 image is not built (make release fetches it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dirs := [2]string{filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")}
	var sums [2][]byte
	for i, dir := range dirs {
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "run", "./hack/cmd/release", "-version", releaseVersion, "-out", dir,
			"-image-arches", strings.Join(arches, ","))
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("release run %d: %v\n%s", i+1, err, out)
		}
		t.Logf("release run %d: %s", i+1, time.Since(start).Round(time.Second))
		if sums[i], err = os.ReadFile(filepath.Join(dir, release.Checksums)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Errorf("two builds differ:\n%s\nand\n%s", sums[0], sums[1])
	}
	files := checkSums(t, dirs[0], sums[0])
	checkChartPackage(t, dirs[0], files)
	for _, arch := range arches {
		checkImage(t, root, filepath.Join(dirs[0], release.ImageArchive(releaseVersion, arch)), arch)
		checkSBOM(t, filepath.Join(dirs[0], release.ImageSBOM(releaseVersion, arch)))
	}
	checkKrew(t, dirs[0], files)
	installPackage(t, filepath.Join(dirs[0], "gpufrac-"+releaseVersion+".tgz"))
}

func crossRoot() string {
	if dir := os.Getenv(release.CrossEnv); dir != "" {
		return dir
	}
	dir, err := release.CrossCacheDir()
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "usr", "bin", "aarch64-linux-gnu-gcc-12")); err != nil {
		return ""
	}
	return dir
}

// checkSums checks that SHA256SUMS lists every file of the directory but
// itself, each with its SHA-256, and returns the listed sums.
func checkSums(t *testing.T, dir string, raw []byte) map[string]string {
	t.Helper()
	sums, err := release.ParseSums(raw)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == release.Checksums {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got := sha256.Sum256(data)
		if want, ok := sums[e.Name()]; !ok || want != hex.EncodeToString(got[:]) {
			t.Errorf("%s: SHA-256 %x, SHA256SUMS lists %q", e.Name(), got, want)
		}
		if st, _ := e.Info(); st.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644", e.Name(), st.Mode())
		}
	}
	if len(sums) != len(entries)-1 {
		t.Errorf("SHA256SUMS lists %d files, the directory holds %d besides it", len(sums), len(entries)-1)
	}
	return sums
}

// checkChartPackage loads the package as Helm does and compares it with
// the chart directory.
func checkChartPackage(t *testing.T, dir string, sums map[string]string) {
	t.Helper()
	pkg := filepath.Join(dir, "gpufrac-"+releaseVersion+".tgz")
	if _, ok := sums[filepath.Base(pkg)]; !ok {
		t.Fatalf("no chart package %s in SHA256SUMS", filepath.Base(pkg))
	}
	packaged, err := loader.Load(pkg)
	if err != nil {
		t.Fatalf("Helm cannot load %s: %v", pkg, err)
	}
	if packaged.Metadata.Version != releaseVersion || packaged.Metadata.AppVersion != releaseVersion {
		t.Errorf("package version %q appVersion %q, want %s for both", packaged.Metadata.Version, packaged.Metadata.AppVersion, releaseVersion)
	}
	source, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	names := func(files []string) []string { slices.Sort(files); return files }
	var got, want []string
	for _, f := range packaged.Raw {
		got = append(got, f.Name)
	}
	for _, f := range source.Raw {
		want = append(want, f.Name)
	}
	if g, w := names(got), names(want); !slices.Equal(g, w) {
		t.Errorf("the package holds %v, Helm reads %v from %s", g, w, chartDir)
	}
}
