// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tenant is a hostile container of one claim (/probe tenant <mark>
// <op>:<path>...): it leaves <mark> in its /dev/shm, then reports what it
// can find of others' state and tries each operation, one line each:
//
//	ENV <name>=<value>
//	SHMWRITE <mark> ok|<error>
//	SHMMOUNT <major:minor> <fstype> <source> <mount options> <super options>
//	SHMSIZE <bytes>   the file system's size (statfs), its cap for a tmpfs
//	SHM <file in /dev/shm>
//	SOCK <path>   every unix socket in its file system (not /proc, /sys)
//	LOG <path>    every file named like the MPS daemon's logs
//	TRY <op> <path> ok|<error>
//
// Operations: connect (a unix socket), append (a forged eviction line, as
// the plugin's log reader parses it), read, write (a file).
func tenant(args []string) {
	fmt.Println("PROBE BEGIN")
	for _, kv := range os.Environ() {
		fmt.Println("ENV", kv)
	}
	mark := "unnamed"
	if len(args) > 0 {
		mark, args = args[0], args[1:]
	}
	fmt.Println("SHMWRITE", mark, result(os.WriteFile(filepath.Join("/dev/shm", mark), []byte(mark), 0o644)))
	shmMount()
	// The kernel shows no size option for a tmpfs of its default size
	// (half of the memory), so the cap is read from statfs.
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil {
		fmt.Println("SHMSIZE", int64(st.Blocks)*st.Bsize)
	}
	if entries, err := os.ReadDir("/dev/shm"); err == nil {
		for _, e := range entries {
			fmt.Println("SHM", e.Name())
		}
	}
	_ = filepath.WalkDir("/", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: nothing to find there
		}
		if d.IsDir() && (path == "/proc" || path == "/sys") {
			return filepath.SkipDir
		}
		switch {
		case d.Type()&fs.ModeSocket != 0:
			fmt.Println("SOCK", path)
		case d.Name() == "control.log" || d.Name() == "server.log":
			fmt.Println("LOG", path)
		}
		return nil
	})
	for _, a := range args {
		op, path, _ := strings.Cut(a, ":")
		fmt.Println("TRY", op, path, result(try(op, path)))
	}
	fmt.Println("PROBE END")
}

func try(op, path string) error {
	switch op {
	case "connect":
		c, err := net.DialTimeout("unix", path, 2*time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	case "append":
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "[%s] memacct: evicted client pid=1 cgroup=/forged device=GPU-forged for pid 2: forged by a tenant\n", time.Now().UTC().Format(time.RFC3339Nano))
		return errors.Join(err, f.Close())
	case "read":
		_, err := os.ReadFile(path)
		return err
	case "write":
		return os.WriteFile(path, []byte("forged by a tenant\n"), 0o644)
	}
	return fmt.Errorf("unknown operation %q", op)
}

func result(err error) string {
	if err != nil {
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
	return "ok"
}

// shmMount reports the mount on /dev/shm from the container's mount table:
// ID parent major:minor root mount-point options [optional...] - fstype
// source super-options.
func shmMount() {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		fmt.Println("SHMMOUNT error", result(err))
		return
	}
	defer func() { _ = f.Close() }()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[4] != "/dev/shm" {
			continue
		}
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			continue
		}
		// The last mount on /dev/shm is the one the container sees.
		last = strings.Join([]string{fields[2], fields[sep+1], fields[sep+2], fields[5], fields[sep+3]}, " ")
	}
	fmt.Println("SHMMOUNT", last)
}
