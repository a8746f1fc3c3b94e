// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubebuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ShellTools are what templates/mps-control-daemon.yaml's script and
// probes run, inside the driver root, besides the shell's builtins.
var ShellTools = []string{"sh", "cat", "rm", "sleep", "mkdir", "cp", "mv", "mkfifo"}

// LauncherName is the launcher's file in a BuildMPSDouble directory; the
// stand-in runs it for the template's /usr/local/bin/gpufrac-mps-launcher.
const LauncherName = "gpufrac-mps-launcher"

// DriverRootDir is the prototype driver root in a BuildMPSDouble directory.
const DriverRootDir = "driver-root"

// HostFile is a host program or library to copy into an image or a
// driver root, at Path there.
type HostFile struct {
	Path string
	Mode os.FileMode
	Data []byte
}

// HostTools reads host programs for /bin/<name>, with the shared libraries
// ldd names at the paths it names them (the dynamic loader included), so
// they run in a root that has nothing else.
func HostTools(ctx context.Context, names []string) ([]HostFile, error) {
	var files []HostFile
	seen := map[string]bool{}
	add := func(rootPath, hostPath string, mode os.FileMode) error {
		if seen[rootPath] {
			return nil
		}
		data, err := os.ReadFile(hostPath)
		if err != nil {
			return fmt.Errorf("copying %s: %w", hostPath, err)
		}
		seen[rootPath] = true
		files = append(files, HostFile{Path: rootPath, Mode: mode, Data: data})
		return nil
	}
	for _, name := range names {
		path, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("the MPS daemon's driver root needs the host's %s: %w", name, err)
		}
		if err := add("/bin/"+name, path, 0o755); err != nil {
			return nil, err
		}
		libs, err := SharedLibraries(ctx, path)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := add(lib, lib, 0o755); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// SharedLibraries asks ldd; a static program has none.
func SharedLibraries(ctx context.Context, path string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", path).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", path, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no path.
		fields := strings.Fields(line)
		for i, f := range fields {
			if strings.HasPrefix(f, "/") && (i == 0 || fields[i-1] == "=>") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}

// BuildMPSDouble builds, into dir, what a simulated node's MPS daemon
// Pods run: gpufrac-mps-launcher (static, the plugin image's), and a
// prototype NVIDIA driver root (DriverRootDir) laid out as a host's: the
// MPS double (test/mpsdouble, static) at usr/bin/nvidia-cuda-mps-control
// and usr/bin/nvidia-smi, the script's shell tools in bin with their
// libraries, and the directories the launcher binds onto. InstallDriverRoot
// copies it into a node's own driver root.
func BuildMPSDouble(ctx context.Context, p *Progress, repoRoot, dir string) error {
	root := filepath.Join(dir, DriverRootDir)
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", root, err)
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	mpsctl := filepath.Join(root, "usr/bin/nvidia-cuda-mps-control")
	if err := p.Run(ctx, "Building the MPS test double (test/mpsdouble) into a driver root", repoRoot, env, "go", "build", "-o", mpsctl, "./test/mpsdouble"); err != nil {
		return err
	}
	if err := p.Run(ctx, "Building gpufrac-mps-launcher", repoRoot, env, "go", "build", "-o", filepath.Join(dir, LauncherName), "./cmd/gpufrac-mps-launcher"); err != nil {
		return err
	}
	smi := filepath.Join(root, "usr/bin/nvidia-smi")
	_ = os.Remove(smi)
	if err := os.Symlink("nvidia-cuda-mps-control", smi); err != nil {
		return fmt.Errorf("linking nvidia-smi to the MPS double: %w", err)
	}
	tools, err := HostTools(ctx, ShellTools)
	if err != nil {
		return err
	}
	for _, f := range tools {
		if err := writeFile(filepath.Join(root, f.Path), f.Data, f.Mode); err != nil {
			return err
		}
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// InstallDriverRoot copies the prototype driver root of a BuildMPSDouble
// directory into root (a node's driver root), keeping what root holds
// (the simulated NVML library).
func InstallDriverRoot(dir, root string) error {
	proto := filepath.Join(dir, DriverRootDir)
	return filepath.Walk(proto, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(proto, path)
		dst := filepath.Join(root, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(dst, 0o755)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			_ = os.Remove(dst)
			return os.Symlink(target, dst)
		default:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return writeFile(dst, data, fi.Mode().Perm())
		}
	})
}

// writeFile replaces path atomically: a daemon of another node may be
// running the old copy.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
