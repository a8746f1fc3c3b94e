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
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/hack/debfetch"
	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/ociimage"
)

// CrossEnv names a directory holding an aarch64 cross toolchain unpacked
// from CrossPackages with `dpkg-deb -x`, for the arm64 image; unset,
// hack/cmd/release fetches one into CrossCacheDir.
const CrossEnv = "GPUFRAC_CROSS_AARCH64"

// CrossPins are Debian bookworm's packages of the aarch64 cross compiler
// and the arm64 C library it links against: gcc-aarch64-linux-gnu and what
// it depends on beyond what a host with gcc 12 has. Each is pinned, version
// and SHA-256 (`apt-cache show <package>=<version>`, field SHA256), because
// the arm64 image's binaries and the C library copied into it come from
// them: a changed package must fail loudly, not change what a release
// ships. The compiler's own packages are amd64 builds (cross compiling runs
// on amd64 only); the arm64 libraries are "Architecture: all".
var CrossPins = []debfetch.Pin{
	{Package: "gcc-12-aarch64-linux-gnu", Version: "12.2.0-14cross1", Arch: "amd64",
		SHA256: "43747bbcd46a4062e66e855090b8ed9c2e06a93ae5a69fb304beebbc8c36d11f"},
	{Package: "cpp-12-aarch64-linux-gnu", Version: "12.2.0-14cross1", Arch: "amd64",
		SHA256: "5921df4ad56e34e6257a1caf862474845aab6548ba7ae7852e8cdd7cb622394e"},
	{Package: "gcc-12-aarch64-linux-gnu-base", Version: "12.2.0-14cross1", Arch: "amd64",
		SHA256: "6ede94430fde75ca023be50b3f5a94aa4a063b2d5c3a359bee169a934930f130"},
	{Package: "binutils-aarch64-linux-gnu", Version: "2.40-2", Arch: "amd64",
		SHA256: "3d6f64a7a4ed6d73719f8fa2e85fd896f58ff7f211a6683942ba93de690aaa66"},
	{Package: "libgcc-12-dev-arm64-cross", Version: "12.2.0-14cross1",
		SHA256: "ff1324e262bae2c3aad685c2ed52bd531ab0a2a337a0fe35c3b720947d55b2ba"},
	{Package: "libgcc-s1-arm64-cross", Version: "12.2.0-14cross1",
		SHA256: "af1e686fc6a416228222e7bfb68317dd2fa2685236301ae29141fc6108a66cac"},
	{Package: "libc6-dev-arm64-cross", Version: "2.36-8cross1",
		SHA256: "5e4cf6abf0e89e89c4b3006bb8b7dc47aa831df25d94df9134929b8b968cacb4"},
	{Package: "libc6-arm64-cross", Version: "2.36-8cross1",
		SHA256: "91936cbbee75771c360ed16513f6e734a25ca5517fe7c3e13dfd7835d7553186"},
	{Package: "linux-libc-dev-arm64-cross", Version: "6.1.4-1cross1",
		SHA256: "66457f015d16b7d372db6591cff38db0da928362ff2ea1fa75491e28f6904d81"},
}

// crossFetchTimeout bounds FetchCross: the packages are about 36 MB.
const crossFetchTimeout = 10 * time.Minute

func crossNames() string {
	names := make([]string, len(CrossPins))
	for i, p := range CrossPins {
		names[i] = p.String()
	}
	return strings.Join(names, " ")
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
			arch, runtime.GOOS, runtime.GOARCH, crossNames())
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

// FetchCross downloads CrossPins with `apt-get download` (Debian's
// registry; nothing is installed), checks each against its pinned SHA-256
// and unpacks them together into dir with `dpkg-deb -x` (hack/debfetch),
// unless dir already holds exactly these pins and the compiler.
func FetchCross(ctx context.Context, progress io.Writer, dir string) error {
	p := kubebuild.NewProgress(progress)
	err := debfetch.Fetch(ctx, dir, CrossPins, debfetch.Options{
		Want:    []string{crossCCPath},
		Timeout: crossFetchTimeout,
		Step: func(string) func(error) {
			return p.Step("Downloading the aarch64 cross compiler (apt-get download " + crossNames() + ")")
		},
	})
	if err != nil {
		return fmt.Errorf("fetching the arm64 image's cross compiler (or set %s to an unpacked one, or leave arm64 out: RELEASE_ARGS=\"-image-arches amd64\"): %w", CrossEnv, err)
	}
	return nil
}

// crossCCPath is the compiler, relative to the unpacked toolchain.
const crossCCPath = "usr/bin/aarch64-linux-gnu-gcc-12"

func crossCC(root string) string {
	return filepath.Join(root, filepath.FromSlash(crossCCPath))
}
