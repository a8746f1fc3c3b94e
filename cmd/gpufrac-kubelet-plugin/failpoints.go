// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build failpoints

package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// Crash tests build the plugin with -tags failpoints: --crash-at-failpoint
// names one of the preparer's failpoints, and the process SIGKILLs itself
// the first time it reaches it. A real SIGKILL, not an error return, so
// nothing the process would do on the way out (deferred writes, flushed
// buffers, closed sockets) happens: what is on disk and in the API server
// at that instant is all a restarted plugin gets.
var crashAt string

func addFailpointFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&crashAt, "crash-at-failpoint", "", "test builds only: SIGKILL this process at the named failpoint (e.g. prepare-after-cdi-write)")
}

func failpointHook() func(string) error {
	if crashAt == "" {
		return nil
	}
	return func(name string) error {
		if name != crashAt {
			return nil
		}
		// The marker line lets the test tell this kill from any other exit.
		fmt.Fprintf(os.Stderr, "FAILPOINT %s reached: SIGKILL\n", name)
		klog.Flush()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered before this goroutine runs again
	}
}
