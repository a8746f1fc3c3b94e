// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package launcher runs a program of the node's NVIDIA driver root
// (nvidia-cuda-mps-control, nvidia-smi, and the daemon script's shell) from
// the plugin's own distroless image: in a private mount namespace it makes
// the driver root the process's root (chroot), with the host's /proc, /dev
// and /sys and the MPS directories bound beneath it, and execs the program
// there.
//
// Why chroot: nvidia-cuda-mps-control starts nvidia-cuda-mps-server itself,
// and both load the driver's libraries, so they must see the driver root's
// own loader, libraries and binaries at their usual paths. NVIDIA's DRA
// driver (templates/mps-control-daemon.tmpl.yaml: `chroot /driver-root sh
// -c`) and device plugin (cmd/mps-control-daemon) run MPS the same way
// (docs/design/nvidia/mps-launcher.md, "Running the node's own MPS").
//
// Unlike those, nothing is mounted into the driver root from the Pod spec:
// the binds exist only in the launcher's mount namespace, so the driver
// root is mounted read-only and gains no mount points on the host. The
// MPS directories go under a private tmpfs on the root's /tmp.
//
// plan.go is the pure part (what to mount, which environment the program
// gets); enter_linux.go does it.
package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultDriverRoot is where the daemon Pod mounts the host's driver root.
const DefaultDriverRoot = "/driver-root"

// RootPath is the PATH inside the driver root: the usual system
// directories, where a driver installation puts nvidia-cuda-mps-control
// and nvidia-smi (usr/bin on a host and in the GPU Operator's driver
// container).
const RootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ScratchDir is the private tmpfs, inside the root, the MPS directories
// are bound beneath.
const ScratchDir = "/tmp/gpufrac-mps"

// DefaultBindEnv names the variables whose directories the program needs:
// the MPS pipe and log directories and gpufrac's config directory.
var DefaultBindEnv = []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "GPUFRAC_MPS_CONFIG"}

// hostTrees are bound recursively at the same path inside the root: MPS
// finds its clients by PID (/proc, with the Pod's hostPID), opens the
// GPU's device nodes and /dev/shm (/dev: the Pod's, with the daemon's own
// in-memory emptyDir mounted on /dev/shm), and NVML reads /sys. A GPU Operator
// driver root is a container's root file system without them.
var hostTrees = []string{"/proc", "/dev", "/sys"}

// Mount is one mount in the launcher's namespace; Source "" with FSType
// "tmpfs" is a fresh tmpfs.
type Mount struct {
	Source, Target, FSType string
}

// Plan is what the launcher does before it execs the program.
type Plan struct {
	Root   string
	Mounts []Mount
	// Env is the program's environment: the caller's, with PATH set to
	// RootPath and each bound variable naming its directory inside the
	// root.
	Env []string
}

// NewPlan validates the request and says what to mount. root is the
// driver root as the launcher sees it; env the launcher's environment;
// bindEnv the variables whose directories are bound into the root.
func NewPlan(root string, env, bindEnv []string) (Plan, error) {
	if root == "" || !filepath.IsAbs(root) {
		return Plan{}, fmt.Errorf("--driver-root %q: must be an absolute path", root)
	}
	root = filepath.Clean(root)
	if root == "/" {
		return Plan{}, fmt.Errorf("--driver-root %q: must be where the host's driver root is mounted, not the launcher's own root", root)
	}
	p := Plan{Root: root}
	for _, t := range hostTrees {
		p.Mounts = append(p.Mounts, Mount{Source: t, Target: filepath.Join(root, t)})
	}
	// The root's own /tmp must exist; a private tmpfs hides what it holds
	// from the program and takes the MPS directories' mount points.
	p.Mounts = append(p.Mounts, Mount{FSType: "tmpfs", Target: filepath.Join(root, path.Dir(ScratchDir))})
	values := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			values[k] = v
		}
	}
	inside := map[string]string{"PATH": RootPath}
	seen := map[string]bool{}
	for _, name := range bindEnv {
		if seen[name] {
			return Plan{}, fmt.Errorf("--bind-env %s: named twice", name)
		}
		seen[name] = true
		dir, ok := values[name]
		if !ok || dir == "" {
			return Plan{}, fmt.Errorf("--bind-env %s: the variable is not set; it must name the directory to bind into the driver root", name)
		}
		if !filepath.IsAbs(dir) {
			return Plan{}, fmt.Errorf("--bind-env %s=%q: must be an absolute path", name, dir)
		}
		target := path.Join(ScratchDir, strings.ToLower(name))
		p.Mounts = append(p.Mounts, Mount{Source: filepath.Clean(dir), Target: filepath.Join(root, target)})
		inside[name] = target
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := inside[k]; ok {
			continue
		}
		p.Env = append(p.Env, kv)
	}
	for _, k := range append([]string{"PATH"}, bindEnv...) {
		p.Env = append(p.Env, k+"="+inside[k])
	}
	return p, nil
}

// FindInRoot finds an executable the launcher would run inside the driver
// root, root being where this process sees that root: the plugin decides
// with it whether the node can run MPS daemons (no binary, no daemon).
func FindInRoot(root, name string) (string, error) {
	for dir := range strings.SplitSeq(RootPath, ":") {
		p := filepath.Join(root, dir, name)
		// A symlink inside the root (nvidia-smi -> ...) resolves against
		// the host's root here; its presence is what counts.
		if fi, err := os.Lstat(p); err == nil && (fi.Mode()&fs.ModeSymlink != 0 || (fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0)) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found under the driver root %s (looked in %s)", name, root, RootPath)
}

// CheckRoot makes sure p.Root is a driver root before anything is mounted
// or created under it: a directory (links resolved) holding real
// directories proc, dev, sys and tmp, not links, which a bind would
// follow out of the root onto the host's own paths. A wrong --driver-root
// otherwise gained proc, dev and sys on the host before the launcher
// failed.
func (p Plan) CheckRoot() error {
	fi, err := os.Stat(p.Root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--driver-root %s does not exist (is the host's driver root mounted there?)", p.Root)
	case err != nil:
		return fmt.Errorf("--driver-root %s: %w", p.Root, err)
	case !fi.IsDir():
		return fmt.Errorf("--driver-root %s is not a directory", p.Root)
	}
	for _, t := range append(slices.Clone(hostTrees), path.Dir(ScratchDir)) {
		dir := filepath.Join(p.Root, t)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("--driver-root %s is not a driver root: it has no %s directory (a host root and the GPU Operator's driver root have one)", p.Root, strings.TrimPrefix(t, "/"))
		case err != nil:
			return fmt.Errorf("--driver-root %s: %w", p.Root, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("--driver-root %s: %s is a symbolic link; a mount on it would land outside the driver root", p.Root, strings.TrimPrefix(t, "/"))
		case !fi.IsDir():
			return fmt.Errorf("--driver-root %s: %s is not a directory", p.Root, strings.TrimPrefix(t, "/"))
		}
	}
	return nil
}

// explainMissing says why name was not found on RootPath under root (the
// root as this process sees it: "/" after the chroot): a symbolic link
// whose target does not exist there is named with its target, rather than
// reported as no program at all.
func explainMissing(root, name string) error {
	for dir := range strings.SplitSeq(RootPath, ":") {
		p := filepath.Join(root, dir, name)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("%s is a symbolic link that cannot be read: %w", filepath.Join(dir, name), err)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is a symbolic link to %s, which does not exist inside the driver root (a link into a path the driver root does not hold, or an incomplete driver installation): %w", filepath.Join(dir, name), target, err)
		}
	}
	return nil
}
