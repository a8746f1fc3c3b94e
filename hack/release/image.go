// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/hostbin"
	"github.com/gpufrac/gpufrac/hack/ociimage"
)

// ImageArchive is the name of the image's OCI archive for linux/arch.
func ImageArchive(v, arch string) string {
	return fmt.Sprintf("gpufrac-image_%s_linux_%s.oci.tar", v, arch)
}

// ImageSBOM is the name of the image's SBOM for linux/arch.
func ImageSBOM(v, arch string) string {
	return fmt.Sprintf("gpufrac-image_%s_linux_%s.cdx.json", v, arch)
}

// imageBinaries builds what the Dockerfile's build stage puts in /out for
// linux/arch: ./cmd/... with cgo, then the host binaries (the Makefile's
// HOST_BINARIES) again without, over the cgo ones.
func (b *builder) imageBinaries(ctx context.Context, arch string, cross []string) (string, error) {
	dir := filepath.Join(b.work, "image-linux-"+arch)
	if err := b.goBuild(ctx, "Building ./cmd/... for the linux/"+arch+" image", dir, "linux", arch, true, cross, "./cmd/..."); err != nil {
		return "", err
	}
	hostBins, err := hostbin.HostBinaries(b.opts.RepoRoot)
	if err != nil {
		return "", err
	}
	pkgs := make([]string, 0, len(hostBins))
	for _, h := range hostBins {
		pkgs = append(pkgs, "./cmd/"+h)
	}
	if err := b.goBuild(ctx, "Building the host binaries without cgo for the linux/"+arch+" image", dir, "linux", arch, false, nil, pkgs...); err != nil {
		return "", err
	}
	return dir, nil
}

// image builds the image for linux/arch as the chart test does
// (harness.ChartImage: the Dockerfile's COPY lines, ENTRYPOINT and USER,
// distroless's users, and the C library the binaries link), writes its OCI
// archive and its SBOM into the output directory, and returns their names.
func (b *builder) image(ctx context.Context, arch string) ([]string, error) {
	t, err := b.toolchain(ctx, arch)
	if err != nil {
		return nil, err
	}
	binDir, err := b.imageBinaries(ctx, arch, t.env)
	if err != nil {
		return nil, err
	}
	df, err := harness.ParseDockerfile(filepath.Join(b.opts.RepoRoot, "deployments", "container", "Dockerfile"))
	if err != nil {
		return nil, err
	}
	img, err := t.image(ctx, df, binDir, b.opts.Version)
	if err != nil {
		return nil, err
	}
	img.ModTime = b.opts.Epoch
	name := ImageArchive(b.opts.Version, arch)
	if err := writeImage(filepath.Join(b.opts.OutDir, name), img, arch); err != nil {
		return nil, err
	}
	bins := make(map[string]string, len(df.Copies))
	for _, bin := range slices.Sorted(maps.Keys(df.Copies)) {
		bins[df.Copies[bin]] = filepath.Join(binDir, bin)
	}
	sbom, err := b.sbom(ctx, img.Name, arch, bins)
	if err != nil {
		return nil, err
	}
	sbomName := ImageSBOM(b.opts.Version, arch)
	if err := writeFile(b.opts.OutDir, sbomName, sbom); err != nil {
		return nil, err
	}
	return []string{name, sbomName}, nil
}

func writeImage(file string, img ociimage.Image, arch string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := ociimage.Write(w, img, arch); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(file, 0o644)
}
