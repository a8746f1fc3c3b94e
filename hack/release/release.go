// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package release builds every artefact a gpufrac release publishes, without
// Docker and reproducibly (`make release VERSION=x.y.z`, hack/cmd/release):
// the Helm chart package, the image as an OCI archive per architecture with
// its SBOM, kubectl-gpufrac's archives for krew's platforms, the krew
// manifest filled from their checksums, and SHA256SUMS over all of them.
// Two builds of one commit give byte-identical files: every archive's
// mtimes are the commit's time (SOURCE_DATE_EPOCH), its entries sorted, its
// owners 0:0 and its modes fixed, gzip headers carry no name or time, and
// the binaries are built with -trimpath, -buildid= and -buildvcs=false
// (docs/releasing.md).
package release

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// Options of a release build.
type Options struct {
	// RepoRoot is the checkout built.
	RepoRoot string
	// Version is the release's version (CheckVersion), without a "v".
	Version string
	// OutDir receives the artefacts; it is emptied first.
	OutDir string
	// Epoch is every archive's mtime; zero means SourceDateEpoch.
	Epoch time.Time
	// ImageArches are the image's architectures (GOARCH names); empty
	// means this machine's.
	ImageArches []string
	// CrossRoot holds the aarch64 cross toolchain (CrossEnv) that an arm64
	// image on amd64 needs.
	CrossRoot string
	// Progress receives the steps; nil discards them.
	Progress io.Writer
}

// Checksums is the name of the checksum file of a release.
const Checksums = "SHA256SUMS"

// KrewManifest is the name of the filled krew manifest.
const KrewManifest = "gpufrac.yaml"

type builder struct {
	opts Options
	p    *kubebuild.Progress
	// work holds the intermediate binaries; removed at the end.
	work string
}

// Build builds the release into opts.OutDir and returns the artefacts'
// checksums by file name (what SHA256SUMS holds).
func Build(ctx context.Context, opts Options) (map[string]string, error) {
	if err := CheckVersion(opts.Version); err != nil {
		return nil, err
	}
	if opts.Epoch.IsZero() {
		var err error
		if opts.Epoch, err = SourceDateEpoch(ctx, opts.RepoRoot); err != nil {
			return nil, err
		}
	}
	if len(opts.ImageArches) == 0 {
		opts.ImageArches = []string{runtime.GOARCH}
	}
	if err := emptyable(opts.OutDir); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(opts.OutDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "gpufrac-release-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	b := &builder{opts: opts, p: kubebuild.NewProgress(opts.Progress), work: work}
	return b.build(ctx)
}

func (b *builder) build(ctx context.Context) (map[string]string, error) {
	v := b.opts.Version
	chartName, chart, err := PackageChart(filepath.Join(b.opts.RepoRoot, "deployments", "helm", "gpufrac"), v, b.opts.Epoch)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{chartName: chart}
	archives, err := b.cli(ctx)
	if err != nil {
		return nil, err
	}
	maps.Copy(files, archives)
	sums := map[string]string{}
	for name, data := range archives {
		sums[name] = sha256Hex(data)
	}
	template, err := os.ReadFile(filepath.Join(b.opts.RepoRoot, "deployments", "krew", "gpufrac.yaml"))
	if err != nil {
		return nil, err
	}
	if files[KrewManifest], err = FillKrew(template, v, sums); err != nil {
		return nil, err
	}
	var written []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := writeFile(b.opts.OutDir, name, files[name]); err != nil {
			return nil, err
		}
		written = append(written, name)
	}
	for _, arch := range b.opts.ImageArches {
		names, err := b.image(ctx, arch)
		if err != nil {
			return nil, fmt.Errorf("the linux/%s image: %w", arch, err)
		}
		written = append(written, names...)
	}
	all := map[string]string{}
	for _, name := range written {
		data, err := os.ReadFile(filepath.Join(b.opts.OutDir, name))
		if err != nil {
			return nil, err
		}
		all[name] = sha256Hex(data)
	}
	return all, writeFile(b.opts.OutDir, Checksums, SumsFile(all))
}

// emptyable refuses to empty a directory that is not an earlier release's
// (no SHA256SUMS in it), so that a mistyped output directory is never
// removed.
func emptyable(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, Checksums)); err != nil {
		return fmt.Errorf("refusing to empty %s for the release: it is not empty and holds no %s of an earlier one", dir, Checksums)
	}
	return nil
}

// SourceDateEpoch is the reproducible-builds convention's
// SOURCE_DATE_EPOCH when set, and otherwise the commit time of HEAD in
// repoRoot: a release is dated by its commit, never by the clock.
func SourceDateEpoch(ctx context.Context, repoRoot string) (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sec < 0 {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	out, err := exec.CommandContext(ctx, "git", "-C", repoRoot, "log", "-1", "--format=%ct", "HEAD").Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("reading HEAD's commit time for SOURCE_DATE_EPOCH (set it to build outside a git checkout): %w", err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log printed %q for HEAD's commit time: %w", out, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}
