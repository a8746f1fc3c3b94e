// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command e2e-probe is the program inside the end-to-end tests' image. As
// /pause it is the pod sandbox (it waits for a signal); as /probe it prints
// what the container sees (its environment, its /dev, its mounts, the files
// of its MPS pipe directory, its linker cache and the driver files it
// resolves to) as "KIND value" lines between PROBE BEGIN and
// PROBE END, then waits for a signal, so the pod stays Running while the
// test reads the log; "/probe tenant" is a hostile tenant instead
// (tenant.go). Static, so it runs in an image without a libc.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	switch {
	case filepath.Base(os.Args[0]) == "pause":
	case len(os.Args) > 1 && os.Args[1] == "tenant":
		tenant(os.Args[2:])
	default:
		probe()
	}
	<-stop
}

func probe() {
	fmt.Println("PROBE BEGIN")
	env := os.Environ()
	slices.Sort(env)
	for _, kv := range env {
		fmt.Println("ENV", kv)
	}
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join("/dev", e.Name()), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			fmt.Printf("DEV /dev/%s c %d:%d\n", e.Name(), unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// ID parent major:minor root mount-point ...
			if fields := strings.Fields(sc.Text()); len(fields) > 4 {
				fmt.Println("MOUNT", fields[4])
			}
		}
		_ = f.Close()
	}
	shmMount()
	if dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); dir != "" {
		files, err := os.ReadDir(dir)
		if err != nil {
			fmt.Println("MPSPIPE error", err)
		}
		for _, f := range files {
			fmt.Println("MPSPIPE", f.Name())
		}
	}
	printDriver()
	fmt.Println("PROBE END")
}
