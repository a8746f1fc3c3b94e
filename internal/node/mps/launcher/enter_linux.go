// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// Exec carries out p and replaces the process with argv run inside the
// root. It returns only on failure. The caller needs CAP_SYS_ADMIN and
// CAP_SYS_CHROOT (the daemon Pod is privileged).
func Exec(p Plan, argv []string) error {
	if len(argv) == 0 {
		return errors.New("no program to run inside the driver root")
	}
	// Before anything is mounted or created: a wrong root must not gain
	// mount points on the host.
	if err := p.CheckRoot(); err != nil {
		return err
	}
	// The mount namespace and the root belong to this thread (unshare of
	// CLONE_NEWNS implies CLONE_FS), and execve keeps the calling
	// thread's: the thread must not change under us.
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("creating a private mount namespace: %w", err)
	}
	// Nothing mounted here may reach the host or the Pod's other
	// processes.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	for _, m := range p.Mounts {
		if err := mount(m); err != nil {
			return err
		}
	}
	if err := syscall.Chroot(p.Root); err != nil {
		return fmt.Errorf("chroot %s: %w", p.Root, err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("chdir / in the driver root: %w", err)
	}
	// exec.LookPath reads PATH from the process environment: the root's.
	if err := os.Setenv("PATH", RootPath); err != nil {
		return err
	}
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		if why := explainMissing("/", argv[0]); why != nil {
			return fmt.Errorf("%s cannot run in the driver root %s: %w", argv[0], p.Root, why)
		}
		return fmt.Errorf("%s not found in the driver root %s (PATH %s): %w", argv[0], p.Root, RootPath, err)
	}
	if err := syscall.Exec(prog, argv, p.Env); err != nil {
		return fmt.Errorf("exec %s in the driver root %s: %w", prog, p.Root, err)
	}
	return nil
}

func mount(m Mount) error {
	if m.FSType == "tmpfs" {
		if err := syscall.Mount("tmpfs", m.Target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=1m"); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s (the driver root needs a /tmp directory): %w", m.Target, err)
		}
		return nil
	}
	fi, err := os.Stat(m.Source)
	if err != nil {
		if target, lerr := os.Readlink(m.Source); lerr == nil {
			return fmt.Errorf("bind source %s is a symbolic link to %s, which does not exist: %w", m.Source, target, err)
		}
		return fmt.Errorf("bind source %s: %w", m.Source, err)
	}
	if fi.IsDir() && strings.Contains(m.Target, ScratchDir+"/") {
		// Targets under the scratch tmpfs are created here; the root's
		// own /proc, /dev and /sys exist (CheckRoot): nothing is created
		// on the root itself.
		if err := os.MkdirAll(m.Target, 0o755); err != nil {
			return fmt.Errorf("creating mount point %s: %w", m.Target, err)
		}
	}
	if err := syscall.Mount(m.Source, m.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s on %s: %w", m.Source, m.Target, err)
	}
	return nil
}
