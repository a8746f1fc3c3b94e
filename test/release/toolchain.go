// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/test/harness"
	"github.com/gpufrac/gpufrac/test/kubebuild"
	"github.com/gpufrac/gpufrac/test/ociimage"
)

// CrossEnv names a directory holding an aarch64 cross toolchain unpacked
// from CrossPackages with `dpkg-deb -x`, for the arm64 image; unset,
// test/cmd/release fetches one into CrossCacheDir.
const CrossEnv = "GPUFRAC_CROSS_AARCH64"

// CrossPackages are Debian bookworm's packages of the aarch64 cross
// compiler and the arm64 C library it links against: gcc-aarch64-linux-gnu
// and what it depends on beyond what a host with gcc 12 has.
var CrossPackages = []string{
	"gcc-12-aarch64-linux-gnu", "cpp-12-aarch64-linux-gnu", "gcc-12-aarch64-linux-gnu-base",
	"binutils-aarch64-linux-gnu", "libgcc-12-dev-arm64-cross", "libgcc-s1-arm64-cross",
	"libc6-dev-arm64-cross", "libc6-arm64-cross", "linux-libc-dev-arm64-cross",
}

// toolchain builds an image's binaries for one architecture and finds the
// C library they link.
type toolchain struct {
	// env is added to go build's (CC and friends for a cross compiler).
	env   []string
	image func(ctx context.Context, df *harness.DockerfileImage, binDir, tag string) (ociimage.Image, error)
}

func (b *builder) toolchain(ctx context.Context, arch string) (*toolchain, error) {
	if arch == runtime.GOARCH {
		// The chart test's image: the host's C library, found by ldd.
		return &toolchain{image: harness.ChartImage}, nil
	}
	root := b.opts.CrossRoot
	if arch != "arm64" || runtime.GOARCH != "amd64" || root == "" {
		return nil, fmt.Errorf("no C cross compiler for linux/%s on %s/%s: the image's binaries link NVML's cgo wrapper; "+
			"for arm64 from amd64, Debian's %s unpacked (FetchCross)",
			arch, runtime.GOOS, runtime.GOARCH, strings.Join(CrossPackages, " "))
	}
	cc := crossCC(root)
	if _, err := os.Stat(cc); err != nil {
		return nil, fmt.Errorf("%s=%s holds no aarch64 compiler: %w", CrossEnv, root, err)
	}
	libDir := filepath.Join(root, "usr", "aarch64-linux-gnu", "lib")
	return &toolchain{
		// The unpacked binutils find their libraries by LD_LIBRARY_PATH;
		// the linker prefixes libc.so's absolute paths with the sysroot.
		// -trimpath keeps both out of the binaries' build information.
		env: []string{"CC=" + cc, "CGO_LDFLAGS=-Wl,--sysroot=" + root,
			"LD_LIBRARY_PATH=" + filepath.Join(root, "usr", "lib", "x86_64-linux-gnu")},
		image: func(_ context.Context, df *harness.DockerfileImage, binDir, tag string) (ociimage.Image, error) {
			return crossImage(df, binDir, tag, libDir)
		},
	}, nil
}

// crossImage is harness.ChartImage for binaries of another architecture:
// ldd cannot run them, so the libraries come from their ELF dynamic
// sections (DT_NEEDED, transitively, and the program interpreter), found in
// the cross C library's libDir and placed where Debian's arm64 images have
// them (/lib/aarch64-linux-gnu, the loader at its PT_INTERP path).
func crossImage(df *harness.DockerfileImage, binDir, tag, libDir string) (ociimage.Image, error) {
	img, err := harness.ChartImageBase(df, binDir, tag)
	if err != nil {
		return img, err
	}
	seen := map[string]bool{}
	var queue []string
	for _, bin := range slices.Sorted(maps.Keys(df.Copies)) {
		queue = append(queue, filepath.Join(binDir, bin))
	}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		needed, interp, err := dynamic(file)
		if err != nil {
			return img, err
		}
		if interp != "" && !seen[interp] {
			seen[interp] = true
			data, err := os.ReadFile(filepath.Join(libDir, path.Base(interp)))
			if err != nil {
				return img, fmt.Errorf("%s's loader %s: %w", file, interp, err)
			}
			img.Files = append(img.Files, ociimage.File{Path: interp, Mode: 0o755, Data: data})
		}
		for _, lib := range needed {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			host := filepath.Join(libDir, lib)
			data, err := os.ReadFile(host)
			if err != nil {
				return img, fmt.Errorf("%s needs %s: %w", file, lib, err)
			}
			img.Files = append(img.Files, ociimage.File{Path: "/lib/aarch64-linux-gnu/" + lib, Mode: 0o755, Data: data})
			queue = append(queue, host)
		}
	}
	return img, nil
}

// dynamic reads an ELF file's DT_NEEDED libraries and program interpreter.
func dynamic(file string) ([]string, string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = f.Close() }()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			raw := make([]byte, p.Filesz)
			if _, err := p.ReadAt(raw, 0); err != nil {
				return nil, "", fmt.Errorf("%s: reading PT_INTERP: %w", file, err)
			}
			interp = strings.TrimRight(string(raw), "\x00")
		}
	}
	return libs, interp, nil
}

// CrossCacheDir is where FetchCross unpacks the cross toolchain by default.
func CrossCacheDir() (string, error) {
	kube, err := kubebuild.CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(kube), "cross-aarch64-bookworm"), nil
}

// FetchCross downloads CrossPackages with `apt-get download` (Debian's
// registry, in the versions this machine's apt index names; nothing is
// installed) and unpacks them into dir with `dpkg-deb -x`, unless dir
// already holds the compiler.
func FetchCross(ctx context.Context, progress io.Writer, dir string) error {
	if _, err := os.Stat(crossCC(dir)); err == nil {
		return nil
	}
	p := kubebuild.NewProgress(progress)
	tmp := dir + ".partial"
	_ = os.RemoveAll(tmp)
	debs := filepath.Join(tmp, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	if err := p.Run(ctx, "Downloading the aarch64 cross compiler (apt-get download "+strings.Join(CrossPackages, " ")+")",
		debs, nil, "apt-get", append([]string{"download"}, CrossPackages...)...); err != nil {
		return fmt.Errorf("fetching the arm64 image's cross compiler (or set %s to an unpacked one, or leave arm64 out: RELEASE_ARGS=\"-image-arches amd64\"): %w", CrossEnv, err)
	}
	files, err := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err != nil || len(files) != len(CrossPackages) {
		return fmt.Errorf("apt-get download left %d packages in %s, want %d", len(files), debs, len(CrossPackages))
	}
	for _, deb := range files {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, filepath.Join(tmp, "root")).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %v: %s", deb, err, out)
		}
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(filepath.Join(tmp, "root"), dir); err != nil {
		return err
	}
	return os.RemoveAll(tmp)
}

func crossCC(root string) string {
	return filepath.Join(root, "usr", "bin", "aarch64-linux-gnu-gcc-12")
}
