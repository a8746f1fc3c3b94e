// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	nvml "github.com/gpufrac/gpufrac/internal/hook/purenvml"
)

// NVMLLibrary is the file name the driver installs NVML under, the name
// NVIDIA's own tools load.
const NVMLLibrary = "libnvidia-ml.so.1"

// libraryDirs are where driver installations put their libraries, relative
// to the driver root: distribution packages and the runfile (lib64,
// lib/<triplet>), and the GPU Operator's driver container, whose root the
// host sees at /run/nvidia/driver with the same layout.
var libraryDirs = []string{
	"usr/lib64",
	"usr/lib/x86_64-linux-gnu",
	"usr/lib/aarch64-linux-gnu",
	"lib64",
	"lib/x86_64-linux-gnu",
	"lib/aarch64-linux-gnu",
	"usr/lib",
	"lib",
}

// maxLinks bounds symbolic link resolution under a driver root.
const maxLinks = 16

// FindNVML finds libnvidia-ml.so.1 under driverRoot and returns its path
// on this host. A link is resolved inside the root (an absolute target
// names a path under the root, as it would inside the driver container),
// so the library loaded is always the driver root's own, never the host's.
func FindNVML(driverRoot string) (string, error) {
	if driverRoot == "" {
		driverRoot = "/"
	}
	if !filepath.IsAbs(driverRoot) {
		return "", fmt.Errorf("--driver-root %q: must be an absolute path", driverRoot)
	}
	root := filepath.Clean(driverRoot)
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("--driver-root %s: not a directory on this host (%v); with the GPU Operator's driver container it is /run/nvidia/driver, with a driver installed on the host /", root, err)
	}
	var looked []string
	for _, dir := range libraryDirs {
		rel := filepath.Join(dir, NVMLLibrary)
		looked = append(looked, filepath.Join(root, rel))
		path, err := resolveUnder(root, rel)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return path, nil
	}
	return "", fmt.Errorf("%s not found under the driver root %s (looked in %s): the NVIDIA driver is not installed there; set the chart's kubeletPlugin.nvidiaDriverRoot to where it is (/run/nvidia/driver with the GPU Operator)",
		NVMLLibrary, root, strings.Join(looked, ", "))
}

// resolveUnder follows rel under root, link by link, keeping every step
// inside root, and returns the host path of the regular file it names.
func resolveUnder(root, rel string) (string, error) {
	cur := filepath.Join("/", rel)
	for range maxLinks {
		host := filepath.Join(root, cur)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if !fi.Mode().IsRegular() {
				return "", fmt.Errorf("%s under the driver root is not a regular file (%s)", host, fi.Mode().Type())
			}
			return host, nil
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(cur), target)
		}
		// Join with "/" first: ".." cannot climb above the root.
		cur = filepath.Join("/", target)
	}
	return "", fmt.Errorf("%s under the driver root %s: more than %d symbolic links", rel, root, maxLinks)
}

// explain says what an NVML return code of nvmlDeviceSetMemoryLimits_v1
// means, in the terms of NVIDIA's NVML reference (docs/design/nvidia/memory-limits.md),
// and what to do about it.
func explain(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_INVALID_ARGUMENT:
		return fmt.Sprintf("%v: the soft limit is above the hard limit, or a limit is above the GPU's total memory", ret)
	case nvml.ERROR_OPERATING_SYSTEM:
		return fmt.Sprintf("%v: the driver cannot open the container's cgroup (it is gone, or not under the cgroup v2 hierarchy at /sys/fs/cgroup)", ret)
	case nvml.ERROR_NOT_SUPPORTED:
		return fmt.Sprintf("%v: no per-cgroup GPU memory limits here: the cgroup has no GPU memory limit files (enable the dmem controller down to the pod's cgroups, or leave the driver's memory accounting on: RmMemacctMode), or the GPU is in MIG mode, which never has them", ret)
	case nvml.ERROR_NOT_FOUND:
		return fmt.Sprintf("%v: the cgroup has no GPU memory limit files (dmem controller not enabled in its parent's cgroup.subtree_control)", ret)
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return fmt.Sprintf("%v: this driver has no %s (it needs r615 / CUDA 13.4 or later); restart gpufrac-kubelet-plugin after a driver change so the node stops offering memoryEnforcement dmem", ret, setMemoryLimitsSymbol)
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Sprintf("%v: setting limits needs root; the runtime must run the hook as root", ret)
	case nvml.ERROR_UNINITIALIZED:
		return fmt.Sprintf("%v: NVML was not initialised", ret)
	}
	return ret.Error()
}
