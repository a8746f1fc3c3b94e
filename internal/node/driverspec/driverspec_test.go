// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package driverspec_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/driverspec"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const version = "580.65.06"

// fakeRoot lays out a driver root as the driver's installer does: the
// versioned libraries, a SONAME link, an unversioned library of another
// package, and binaries (one not executable).
func fakeRoot(t *testing.T, libDir string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]os.FileMode{
		libDir + "/libcuda.so." + version:                  0o755,
		libDir + "/libnvidia-ml.so." + version:             0o755,
		libDir + "/libnvidia-ptxjitcompiler.so." + version: 0o755,
		libDir + "/libz.so.1":                              0o755,
		"usr/bin/nvidia-smi":                               0o755,
		"usr/bin/nvidia-cuda-mps-control":                  0o755,
		"usr/bin/nvidia-debugdump":                         0o644,
	}
	for p, mode := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("libcuda.so."+version, filepath.Join(root, libDir, "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestDiscoverFindsTheDriversFiles(t *testing.T) {
	for _, libDir := range []string{"usr/lib64", "usr/lib/x86_64-linux-gnu"} {
		t.Run(libDir, func(t *testing.T) {
			root := fakeRoot(t, libDir)
			d, err := driverspec.Discover(driverspec.Options{Root: root})
			if err != nil {
				t.Fatal(err)
			}
			dir := "/" + libDir
			want := driverspec.Driver{
				Version: version,
				LibDirs: []string{dir},
				Libraries: []string{
					dir + "/libcuda.so." + version, dir + "/libnvidia-ml.so." + version, dir + "/libnvidia-ptxjitcompiler.so." + version,
				},
				Binaries: []string{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control"},
			}
			slices.Sort(d.Libraries)
			if !equal(d, want) {
				t.Errorf("Discover = %+v, want %+v", d, want)
			}
		})
	}
}

func equal(a, b driverspec.Driver) bool {
	return a.Version == b.Version && slices.Equal(a.LibDirs, b.LibDirs) && slices.Equal(a.Libraries, b.Libraries) && slices.Equal(a.Binaries, b.Binaries)
}

// A folder reached twice through a link (/lib64 → usr/lib64) is mounted
// once.
func TestDiscoverMountsALinkedFolderOnce(t *testing.T) {
	root := fakeRoot(t, "usr/lib64")
	if err := os.Symlink("usr/lib64", filepath.Join(root, "lib64")); err != nil {
		t.Fatal(err)
	}
	d, err := driverspec.Discover(driverspec.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.LibDirs, []string{"/usr/lib64"}) || len(d.Libraries) != 3 {
		t.Errorf("Discover = %+v, want /usr/lib64 once with its 3 libraries", d)
	}
}

func TestDiscoverRefusesARootWithoutTheDriver(t *testing.T) {
	root := fakeRoot(t, "usr/lib64")
	if _, err := driverspec.Discover(driverspec.Options{Root: root, Version: "999.1"}); !errors.Is(err, driverspec.ErrNoDriver) || !strings.Contains(err.Error(), "libcuda.so.999.1") {
		t.Errorf("a driver root whose files do not carry NVML's version: %v, want ErrNoDriver naming libcuda.so.999.1", err)
	}
	if _, err := driverspec.Discover(driverspec.Options{Root: t.TempDir()}); !errors.Is(err, driverspec.ErrNoDriver) {
		t.Errorf("an empty driver root: %v, want ErrNoDriver", err)
	}
	if _, err := driverspec.Discover(driverspec.Options{Root: "run/nvidia/driver"}); err == nil {
		t.Error("a relative driver root was accepted")
	}
}

// The GPU Operator's layout: the plugin sees the driver root at its
// mount, the spec names the host path.
func TestEditsNameHostPathsUnderTheDriverRoot(t *testing.T) {
	mount := fakeRoot(t, "usr/lib64")
	const root = "/run/nvidia/driver"
	d, err := driverspec.Discover(driverspec.Options{Root: root, LookupRoot: mount})
	if err != nil {
		t.Fatal(err)
	}
	e := d.Edits(root, "/var/lib/gpufrac/bin/gpufrac-cdi-hook")
	mounts := map[string]string{}
	for _, m := range e.Mounts {
		mounts[m.ContainerPath] = m.HostPath
		if !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
			t.Errorf("mount %s has options %v, want read-only, nosuid, nodev", m.ContainerPath, m.Options)
		}
	}
	for _, p := range []string{"/usr/lib64/libcuda.so." + version, "/usr/lib64/libnvidia-ml.so." + version, "/usr/bin/nvidia-smi"} {
		if mounts[p] != root+p {
			t.Errorf("container path %s mounts %q, want %s", p, mounts[p], root+p)
		}
	}
	if len(e.Hooks) != 1 {
		t.Fatalf("hooks %+v, want the ldcache hook", e.Hooks)
	}
	h := e.Hooks[0]
	want := []string{"gpufrac-cdi-hook", "ldcache", "--driver-root", root, "--folder", "/usr/lib64"}
	if h.HookName != "createContainer" || h.Path != "/var/lib/gpufrac/bin/gpufrac-cdi-hook" || !slices.Equal(h.Args, want) {
		t.Errorf("hook %+v, want createContainer %v", h, want)
	}
}

func TestDevRoot(t *testing.T) {
	withDev := t.TempDir()
	if err := os.Mkdir(filepath.Join(withDev, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := driverspec.DevRoot("/run/nvidia/driver", withDev); got != "/run/nvidia/driver" {
		t.Errorf("DevRoot of a driver root with /dev = %s, want the driver root", got)
	}
	if got := driverspec.DevRoot("/run/nvidia/driver", t.TempDir()); got != "/" {
		t.Errorf("DevRoot of a driver root without /dev = %s, want /", got)
	}
}

func TestDeviceNodeUnderADevRoot(t *testing.T) {
	// /dev/null stands for a device node: char 1:3 on every Linux.
	node, err := driverspec.DeviceNodeUnder("/run/nvidia/driver", "/")("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	if node.Path != "/dev/null" || node.HostPath != "/run/nvidia/driver/dev/null" || node.Type != "c" || node.Major != 1 || node.Minor != 3 {
		t.Errorf("node %+v, want /dev/null from /run/nvidia/driver/dev/null, c 1:3", node)
	}
	host, err := driverspec.DeviceNodeUnder("/", "")("/dev/null")
	if err != nil || host.HostPath != "" || host.Path != "/dev/null" {
		t.Errorf("a node under the host's root: %+v %v, want no separate host path", host, err)
	}
	if _, err := driverspec.DeviceNodeUnder("/", "")("/dev/no-such-node"); err == nil {
		t.Error("a missing device node was accepted")
	}
}

// The claim's spec carries the driver, and the container ends with one
// NVIDIA_VISIBLE_DEVICES: the claim's GPUs, whatever the image set.
func TestSpecCarriesTheDriverAndOneVisibleDevices(t *testing.T) {
	root := fakeRoot(t, "usr/lib64")
	d, err := driverspec.Discover(driverspec.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode, Driver: d.Edits(root, "/hook")})
	if err != nil {
		t.Fatal(err)
	}
	claim := &plan.Claim{UID: "uid-1", Namespace: "ns", Name: "llm", Devices: []plan.Device{{
		Request: "gpu", Pool: "node-a", Device: "gpu-1", ShareID: ptr.To(types.UID("s1")),
		GPU:            domain.GPU{UUID: "GPU-1", Index: 1, Minor: 1, MemoryBytes: 141 << 30},
		SoftLimitBytes: 20 << 30, HardLimitBytes: 30 << 30, ComputeMode: v1alpha1.TimeSlicing, Enforcement: domain.EnforcementDMem,
	}}}
	ids, err := w.Write(claim)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	// A CUDA image sets NVIDIA_VISIBLE_DEVICES=all itself.
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"}}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatal(err)
	}
	var visible []string
	for _, kv := range spec.Process.Env {
		if v, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
			visible = append(visible, v)
		}
	}
	if !slices.Equal(visible, []string{"GPU-1"}) {
		t.Errorf("the container ends with NVIDIA_VISIBLE_DEVICES %q, want exactly one value, GPU-1", visible)
	}
	mounted := map[string]bool{}
	for _, m := range spec.Mounts {
		mounted[m.Destination] = true
	}
	for _, p := range []string{"/usr/lib64/libcuda.so." + version, "/usr/lib64/libnvidia-ml.so." + version, "/usr/bin/nvidia-smi"} {
		if !mounted[p] {
			t.Errorf("the container does not get %s: mounts %v", p, spec.Mounts)
		}
	}
	if spec.Hooks == nil || len(spec.Hooks.CreateContainer) != 1 || !slices.Contains(spec.Hooks.CreateContainer[0].Args, "ldcache") {
		t.Errorf("the container's createContainer hooks %+v, want the ldcache hook", spec.Hooks)
	}
}
