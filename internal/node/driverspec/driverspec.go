// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package driverspec finds the NVIDIA driver's user-space files under a
// driver root and renders them as CDI container edits, so a claim's spec
// carries the driver itself and a container runs CUDA on a node with
// containerd or CRI-O, runc and CDI and no NVIDIA runtime.
//
// It follows what NVIDIA's own generator puts in a spec
// (nvidia-container-toolkit pkg/nvcdi/driver-nvml.go): every library
// whose name ends in the driver version, found in the folders that hold
// libcuda.so.<version>; the driver's binaries; each bind-mounted read-only
// at its path relative to the driver root; and a createContainer hook that
// updates the container's linker cache for those folders. NVIDIA's hooks
// run nvidia-cdi-hook, which is not on gpufrac's nodes and whose glibc
// floor is not ours; the cache step runs `gpufrac-cdi-hook ldcache`
// instead (internal/hook/ldcachehook), and ldconfig itself creates the
// SONAME links (libcuda.so.1 → libcuda.so.<version>) NVIDIA's
// create-symlinks step would otherwise need.
package driverspec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// ErrNoDriver says the driver root holds no versioned libcuda or NVML.
var ErrNoDriver = errors.New("no NVIDIA driver libraries found")

// LibrarySearchDirs are where installations put the driver's libraries,
// relative to the driver root: nvidia-container-toolkit's default library
// search paths (pkg/lookup/library.go), which cover distribution packages,
// the runfile and the GPU Operator's driver container.
var LibrarySearchDirs = []string{
	"/usr/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib/x86_64-linux-gnu/nvidia/current",
	"/usr/lib/aarch64-linux-gnu/nvidia/current",
	"/lib64",
	"/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu",
	"/lib/x86_64-linux-gnu/nvidia/current",
	"/lib/aarch64-linux-gnu/nvidia/current",
}

// Binaries are the driver's programs a container gets, as NVIDIA's
// generator lists them (pkg/nvcdi/driver-nvml.go
// newDriverBinariesDiscoverer).
var Binaries = []string{
	"nvidia-smi",
	"nvidia-debugdump",
	"nvidia-persistenced",
	"nvidia-cuda-mps-control",
	"nvidia-cuda-mps-server",
	"nvidia-imex",
	"nvidia-imex-ctl",
}

// BinarySearchDirs are where the binaries are looked up, relative to the
// driver root (NVIDIA's DRA driver's search list, cmd/gpu-kubelet-plugin
// root.go).
var BinarySearchDirs = []string{"/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin"}

// versionProbes are the libraries whose suffix gives the driver version,
// in NVIDIA's order (internal/lookup/root/root.go inferVersion).
var versionProbes = []string{"libcuda.so.", "libnvidia-ml.so."}

// mountOptions are NVIDIA's for driver files: read-only, no set-uid, no
// devices.
var mountOptions = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}

// Options say where the driver is.
type Options struct {
	// Root is the host path of the driver root: "/" for a driver installed
	// on the host, /run/nvidia/driver with the GPU Operator. The spec's
	// host paths are under it.
	Root string
	// LookupRoot is where this process sees Root (the plugin's
	// --driver-root-mount); empty: Root.
	LookupRoot string
	// Version, when set, is the driver version NVML reported; the files
	// must carry it. Empty: inferred from the files, as NVIDIA does.
	Version string
}

// Driver is what Discover found: paths inside the container, which are
// the paths relative to the driver root.
type Driver struct {
	Version   string
	LibDirs   []string
	Libraries []string
	Binaries  []string
}

// Discover finds the driver's libraries and binaries under opts' root.
func Discover(opts Options) (Driver, error) {
	if !filepath.IsAbs(opts.Root) {
		return Driver{}, fmt.Errorf("driver root %q: must be an absolute host path", opts.Root)
	}
	look := opts.LookupRoot
	if look == "" {
		look = opts.Root
	}
	version, err := findVersion(look, opts.Version)
	if err != nil {
		return Driver{}, err
	}
	d := Driver{Version: version}
	for _, dir := range LibrarySearchDirs {
		libs, err := versionedLibraries(look, dir, version)
		if err != nil {
			return Driver{}, err
		}
		if len(libs) > 0 && !slices.Contains(d.LibDirs, dir) && !sameDirAs(look, dir, d.LibDirs) {
			d.LibDirs = append(d.LibDirs, dir)
			d.Libraries = append(d.Libraries, libs...)
		}
	}
	for _, name := range Binaries {
		for _, dir := range BinarySearchDirs {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(filepath.Join(look, p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				d.Binaries = append(d.Binaries, p)
				break
			}
		}
	}
	return d, nil
}

// findVersion returns want when a versioned libcuda or NVML carries it,
// or the version the first one found carries.
func findVersion(look, want string) (string, error) {
	var looked []string
	for _, prefix := range versionProbes {
		for _, dir := range LibrarySearchDirs {
			looked = append(looked, filepath.Join(look, dir, prefix+"*"))
			matches, err := filepath.Glob(filepath.Join(look, dir, prefix+"*.*"))
			if err != nil {
				return "", fmt.Errorf("looking for %s* under %s: %w", prefix, filepath.Join(look, dir), err)
			}
			for _, m := range matches {
				v := strings.TrimPrefix(filepath.Base(m), prefix)
				if want == "" || v == want {
					return v, nil
				}
			}
		}
	}
	what := "libcuda.so.<version> or libnvidia-ml.so.<version>"
	if want != "" {
		what = "libcuda.so." + want + " or libnvidia-ml.so." + want + " (the version NVML reports)"
	}
	return "", fmt.Errorf("%w: no %s under the driver root %s (looked for %s): set the chart's kubeletPlugin.nvidiaDriverRoot to where the driver is (/run/nvidia/driver with the GPU Operator)",
		ErrNoDriver, what, look, strings.Join(looked, ", "))
}

// versionedLibraries lists dir's files named lib*.so.<version>, as paths
// relative to the root.
func versionedLibraries(look, dir, version string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(look, dir))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the driver's library folder %s: %w", filepath.Join(look, dir), err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "lib") && strings.HasSuffix(name, ".so."+version) && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, name))
		}
	}
	return out, nil
}

// sameDirAs tells whether dir is one of seen through a link (/lib64 is
// often /usr/lib64), so no library is mounted twice.
func sameDirAs(look, dir string, seen []string) bool {
	fi, err := os.Stat(filepath.Join(look, dir))
	if err != nil {
		return false
	}
	for _, s := range seen {
		if other, err := os.Stat(filepath.Join(look, s)); err == nil && os.SameFile(fi, other) {
			return true
		}
	}
	return false
}

// Edits renders d as container edits: each file bind-mounted read-only
// from under root to its path in the container, and the hook that adds
// d's library folders to the container's linker cache. hookPath is the
// host path of gpufrac-cdi-hook.
func (d Driver) Edits(root, hookPath string) *cdispec.ContainerEdits {
	e := &cdispec.ContainerEdits{}
	for _, p := range append(slices.Clone(d.Libraries), d.Binaries...) {
		e.Mounts = append(e.Mounts, &cdispec.Mount{
			HostPath: filepath.Join(root, p), ContainerPath: p, Options: slices.Clone(mountOptions),
		})
	}
	if len(d.LibDirs) > 0 {
		args := []string{"gpufrac-cdi-hook", "ldcache", "--driver-root", root}
		for _, dir := range d.LibDirs {
			args = append(args, "--folder", dir)
		}
		// createContainer: the runtime runs it in the container's mount
		// namespace before pivot_root, where the bind mounts above are
		// visible under the container's root (NVIDIA's update-ldcache
		// hook is a createContainer hook for the same reason).
		e.Hooks = append(e.Hooks, &cdispec.Hook{HookName: "createContainer", Path: hookPath, Args: args})
	}
	return e
}
