// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/release"
)

// untar reads a tar (gzip'd when gz) into a map of contents and modes.
func untar(t *testing.T, r io.Reader, gz bool) (map[string][]byte, map[string]int64) {
	t.Helper()
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	files, modes := map[string][]byte{}, map[string]int64{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name], modes[hdr.Name] = data, hdr.Mode
	}
}

// blob reads a descriptor's blob of an OCI layout, checking its digest.
func blob(t *testing.T, layout map[string][]byte, digest string) []byte {
	t.Helper()
	data, ok := layout["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	sum := sha256.Sum256(data)
	if !ok || "sha256:"+hex.EncodeToString(sum[:]) != digest {
		t.Fatalf("blob %s missing or not matching its digest", digest)
	}
	return data
}

// checkImage opens the OCI archive as `ctr images import` reads it and
// checks the layer's binaries against the Dockerfile.
func checkImage(t *testing.T, root, archive, arch string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	layout, _ := untar(t, f, false)
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(layout["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("%s: index.json %s (%v)", archive, layout["index.json"], err)
	}
	if ref := index.Manifests[0].Annotations["io.containerd.image.name"]; ref != harness.ChartImageRepository+":"+releaseVersion {
		t.Errorf("%s names the image %q, want the chart's %s:%s", archive, ref, harness.ChartImageRepository, releaseVersion)
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, layout, index.Manifests[0].Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("%s: manifest: %v", archive, err)
	}
	var cfg struct {
		Architecture string `json:"architecture"`
	}
	if err := json.Unmarshal(blob(t, layout, manifest.Config.Digest), &cfg); err != nil || cfg.Architecture != arch {
		t.Errorf("%s: config architecture %q (%v), want %s", archive, cfg.Architecture, err, arch)
	}
	files, modes := untar(t, bytes.NewReader(blob(t, layout, manifest.Layers[0].Digest)), false)
	df, err := harness.ParseDockerfile(filepath.Join(root, "deployments", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	for bin, dest := range df.Copies {
		data, ok := files[strings.TrimPrefix(dest, "/")]
		if !ok || modes[strings.TrimPrefix(dest, "/")] != 0o755 {
			t.Errorf("%s: no executable %s at the Dockerfile's %s", archive, bin, dest)
			continue
		}
		checkBinary(t, archive+":"+dest, data, machine)
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			continue
		}
		for _, p := range ef.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			interp := make([]byte, p.Filesz)
			_, _ = p.ReadAt(interp, 0)
			if _, ok := files[strings.TrimPrefix(strings.TrimRight(string(interp), "\x00"), "/")]; !ok {
				t.Errorf("%s: %s's loader %s is not in the image", archive, dest, interp)
			}
		}
	}
}

// checkBinary checks a Go binary's architecture, that it was built
// -trimpath (which also keeps -ldflags out of the build information, so the
// version is looked for in the binary's data) and the version the release
// stamped into it.
func checkBinary(t *testing.T, what string, data []byte, machine elf.Machine) {
	t.Helper()
	if machine != 0 {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil || ef.Machine != machine {
			t.Errorf("%s: not an ELF binary for %v (%v)", what, machine, err)
			return
		}
	}
	info, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: no Go build information: %v", what, err)
		return
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["vcs.revision"] != "" {
		t.Errorf("%s: built with %v, want -trimpath and no VCS stamp", what, settings)
	}
	// The version is stamped into internal/buildinfo; a binary that does
	// not link that package (the hook, the launcher, the CLI) has nowhere
	// to carry it, and the linker drops the -X for it.
	// The package's function names stay in the symbol table Go keeps for
	// tracebacks even in a stripped binary.
	stamped := bytes.Contains(data, []byte("gpufrac/gpufrac/internal/buildinfo."))
	if !stamped {
		return
	}
	if !bytes.Contains(data, []byte(releaseVersion)) {
		t.Errorf("%s: the version %s is not stamped in", what, releaseVersion)
	}
}

// checkSBOM checks the image's SBOM names the image and gpufrac's modules.
func checkSBOM(t *testing.T, file string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Type, Name string } `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Purl string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &bom); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Type != "container" ||
		bom.Metadata.Component.Name != harness.ChartImageRepository+":"+releaseVersion {
		t.Errorf("%s: format %q subject %+v, want a CycloneDX document about the image", file, bom.BOMFormat, bom.Metadata.Component)
	}
	var purls []string
	for _, c := range bom.Components {
		purls = append(purls, c.Purl)
	}
	for _, want := range []string{"pkg:golang/github.com/gpufrac/gpufrac@v" + releaseVersion, "pkg:golang/k8s.io/client-go@v0.37.2", "pkg:golang/github.com/NVIDIA/go-nvml@"} {
		found := false
		for _, p := range purls {
			found = found || strings.HasPrefix(p, want)
		}
		if !found {
			t.Errorf("%s lists no %s among %d components", file, want, len(purls))
		}
	}
}

// checkKrew checks the filled manifest against the archives.
func checkKrew(t *testing.T, dir string, sums map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, release.KrewManifest))
	if err != nil {
		t.Fatal(err)
	}
	// Not strict: the manifest carries krew's other fields (apiVersion,
	// metadata, files, descriptions); those checked here must be right.
	var plugin struct {
		Kind string `json:"kind"`
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &plugin); err != nil {
		t.Fatalf("krew manifest: %v", err)
	}
	if plugin.Kind != "Plugin" {
		t.Errorf("krew manifest kind %q, want Plugin", plugin.Kind)
	}
	if plugin.Spec.Version != releaseVersion || len(plugin.Spec.Platforms) != len(release.CLIPlatforms) {
		t.Errorf("krew manifest version %q with %d platforms", plugin.Spec.Version, len(plugin.Spec.Platforms))
	}
	for _, p := range plugin.Spec.Platforms {
		goos, goarch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		name := release.CLIArchive(releaseVersion, goos, goarch)
		if path.Base(p.URI) != name || p.SHA256 != sums[name] || p.SHA256 == "" {
			t.Errorf("krew %s/%s: uri %s sha256 %s, want %s with SHA256SUMS's %s", goos, goarch, p.URI, p.SHA256, name, sums[name])
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files, _ := untar(t, f, true)
		_ = f.Close()
		bin := files[p.Bin]
		if goos == "darwin" {
			mf, err := macho.NewFile(bytes.NewReader(bin))
			want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
			if err != nil || mf.Cpu != want {
				t.Errorf("%s: %s is not a Mach-O binary for %s (%v)", name, p.Bin, goarch, err)
			}
			checkBinary(t, name, bin, 0)
			continue
		}
		checkBinary(t, name, bin, map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch])
	}
}

// installPackage installs the packaged chart on a control plane of its own
// (the package's other tests apply the chart's cluster-scoped objects to
// theirs) without waiting for pods, which a control plane without nodes
// never runs, and checks the workloads run the release's image.
func installPackage(t *testing.T, pkg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rcp, err := harness.Start(ctx, harness.Options{Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rcp.Close() }()
	h, err := rcp.NewHelm(ctx, "gpufrac-release-test")
	if err != nil {
		t.Fatal(err)
	}
	h.FromPackage(pkg)
	h.NoWait = true
	rel, err := h.Install(ctx, "gpufrac", map[string]any{})
	if err != nil {
		t.Fatalf("installing %s: %v", pkg, err)
	}
	if rel.Status != "deployed" {
		t.Errorf("release %s: status %q, want deployed", rel.Name, rel.Status)
	}
	want := harness.ChartImageRepository + ":" + releaseVersion
	dss, err := rcp.Client.AppsV1().DaemonSets(h.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(dss.Items) == 0 {
		t.Fatalf("the release's DaemonSets: %d (%v)", len(dss.Items), err)
	}
	deps, err := rcp.Client.AppsV1().Deployments(h.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) == 0 {
		t.Fatalf("the release's Deployments: %d (%v)", len(deps.Items), err)
	}
	for _, spec := range []struct {
		kind, name string
		image      string
	}{{"DaemonSet", dss.Items[0].Name, dss.Items[0].Spec.Template.Spec.Containers[0].Image},
		{"Deployment", deps.Items[0].Name, deps.Items[0].Spec.Template.Spec.Containers[0].Image}} {
		if spec.image != want {
			t.Errorf("%s %s runs %s, want the release's image %s", spec.kind, spec.name, spec.image, want)
		}
	}
}
