// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package ldcachehook is `gpufrac-cdi-hook ldcache`, the createContainer
// hook of a claim's CDI spec that makes the driver libraries the spec
// bind-mounts findable in the container: it writes the driver's library
// folders into a drop-in of the container's /etc/ld.so.conf.d and runs the
// host's ldconfig chrooted into the container's root (`ldconfig -r`),
// which rebuilds the container's /etc/ld.so.cache and creates the SONAME
// links (libcuda.so.1 → libcuda.so.<version>) in those folders.
//
// It does the work of NVIDIA's update-ldcache and create-symlinks hooks
// (nvidia-container-toolkit cmd/nvidia-cdi-hook) without nvidia-cdi-hook,
// which gpufrac's nodes need not have. It has no cgo: gpufrac-cdi-hook
// runs in the host's namespace on every supported host.
//
// The container's root is tenant-controlled: every path this hook writes
// there is resolved inside the root (openat2 RESOLVE_IN_ROOT), so a link
// in the image can never point a write at the host, and ldconfig runs
// chrooted.
package ldcachehook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DropIn is the file, in the container, that lists the driver's library
// folders, so that an ldconfig the container runs later keeps them.
const DropIn = "/etc/ld.so.conf.d/00-gpufrac-driver.conf"

// maxStateBytes bounds the OCI state and config the hook reads.
const maxStateBytes = 1 << 20

// Options are the hook's flags.
type Options struct {
	// Folders are the driver's library folders inside the container.
	Folders []string
	// DriverRoot is the host path of the driver root; its ldconfig is
	// preferred (the GPU Operator's driver container has one where a
	// minimal host may not).
	DriverRoot string
	// LDConfig, when set, is the ldconfig to run.
	LDConfig string
}

// ldconfigCandidates are where ldconfig lives, relative to a root:
// Debian and Ubuntu ship the binary as ldconfig.real behind a shell
// wrapper, which would not run chrooted into an image without a shell.
var ldconfigCandidates = []string{"/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"}

// Run reads the OCI state from state and updates the container's cache.
func Run(state io.Reader, opts Options) error {
	if len(opts.Folders) == 0 {
		return errors.New("--folder: at least one library folder is needed")
	}
	for _, f := range opts.Folders {
		if !filepath.IsAbs(f) || strings.ContainsAny(f, "\n\x00") || filepath.Clean(f) != f {
			return fmt.Errorf("--folder %q: must be a clean absolute path in the container", f)
		}
	}
	root, err := ContainerRoot(state)
	if err != nil {
		return err
	}
	ldconfig, err := findLDConfig(opts)
	if err != nil {
		return err
	}
	if err := writeDropIn(root, opts.Folders); err != nil {
		return err
	}
	args := []string{"-r", root, "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"}
	// The folders also on the command line: an image whose
	// /etc/ld.so.conf does not include ld.so.conf.d still gets them.
	args = append(args, opts.Folders...)
	cmd := exec.Command(ldconfig, args...)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("running %s %s: %w: %s", ldconfig, strings.Join(args, " "), err, capText(out))
	}
	return nil
}

func findLDConfig(opts Options) (string, error) {
	if opts.LDConfig != "" {
		return opts.LDConfig, nil
	}
	var looked []string
	for _, root := range []string{opts.DriverRoot, "/"} {
		if root == "" {
			continue
		}
		for _, c := range ldconfigCandidates {
			p := filepath.Join(root, c)
			looked = append(looked, p)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no ldconfig found (looked at %s): the driver's libraries cannot be added to the container's linker cache; give one with --ldconfig", strings.Join(looked, ", "))
}

// ContainerRoot reads the OCI state (the bundle) and the bundle's config
// (root.path) and returns the container's root as this process sees it.
func ContainerRoot(state io.Reader) (string, error) {
	var st struct {
		Bundle string `json:"bundle"`
	}
	raw, err := io.ReadAll(io.LimitReader(state, maxStateBytes))
	if err != nil {
		return "", fmt.Errorf("reading the OCI state: %w", err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("parsing the OCI state: %w", err)
	}
	if !filepath.IsAbs(st.Bundle) {
		return "", fmt.Errorf("OCI state bundle %q: must be an absolute path", st.Bundle)
	}
	f, err := os.Open(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return "", fmt.Errorf("opening the bundle's config: %w", err)
	}
	defer func() { _ = f.Close() }()
	var cfg struct {
		Root *struct {
			Path string `json:"path"`
		} `json:"root"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 16*maxStateBytes)).Decode(&cfg); err != nil {
		return "", fmt.Errorf("parsing the bundle's config %s: %w", f.Name(), err)
	}
	if cfg.Root == nil || cfg.Root.Path == "" {
		return "", fmt.Errorf("the bundle's config %s names no root.path", f.Name())
	}
	root := cfg.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(st.Bundle, root)
	}
	if filepath.Clean(root) == "/" {
		return "", errors.New("the container's root is the host's root: refusing to change the host's linker cache")
	}
	return root, nil
}

// writeDropIn writes DropIn (and /etc/ld.so.conf where the image has
// none) inside root, every path resolved inside root.
func writeDropIn(root string, folders []string) error {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the container root %s: %w", root, err)
	}
	defer func() { _ = unix.Close(rootFD) }()
	for _, dir := range []string{"etc", "etc/ld.so.conf.d"} {
		if err := mkdirIn(rootFD, dir); err != nil {
			return fmt.Errorf("creating /%s in the container root %s: %w", dir, root, err)
		}
	}
	if err := writeIn(rootFD, "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n", false); err != nil {
		return fmt.Errorf("writing /etc/ld.so.conf in the container root %s: %w", root, err)
	}
	body := "# The NVIDIA driver's library folders (gpufrac-cdi-hook ldcache)\n" + strings.Join(folders, "\n") + "\n"
	if err := writeIn(rootFD, strings.TrimPrefix(DropIn, "/"), body, true); err != nil {
		return fmt.Errorf("writing %s in the container root %s: %w", DropIn, root, err)
	}
	return nil
}

var inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// mkdirIn creates rel under rootFD unless it is there: the parent is
// resolved inside the root and the last element is made there, so a link
// named rel is not followed out.
func mkdirIn(rootFD int, rel string) error {
	parent, name := filepath.Split(rel)
	pfd, err := unix.Openat2(rootFD, "/"+parent, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: uint64(inRoot)})
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(pfd) }()
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

// writeIn writes body to rel under rootFD; without replace an existing
// file is kept. The last element is never followed as a link.
func writeIn(rootFD int, rel, body string, replace bool) error {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if replace {
		flags |= unix.O_TRUNC
	} else {
		flags |= unix.O_EXCL
	}
	fd, err := unix.Openat2(rootFD, "/"+rel, &unix.OpenHow{Flags: uint64(flags), Mode: 0o644, Resolve: uint64(inRoot)})
	if !replace && errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer func() { _ = f.Close() }()
	if _, err := f.WriteString(body); err != nil {
		return err
	}
	return f.Close()
}

func capText(b []byte) string {
	const limit = 2048
	s := strings.TrimSpace(string(b))
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
