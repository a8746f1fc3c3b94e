// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command kube-binaries builds (once per machine and recipe) the upstream
// binaries the integration tests and the demo run, and prints where they are.
// `make test` runs it first, so a cold build shows its progress on the
// terminal instead of inside go test's buffered output. With -node it also
// builds the real node's pieces (hack/nodebuild) where the end-to-end tests
// can run, and otherwise says why they will skip.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/nodebuild"
)

func main() {
	kubectl := flag.Bool("kubectl", false, "also build kubectl")
	quiet := flag.Bool("q", false, "print nothing when the binaries are already built")
	node := flag.Bool("node", false, "also build the real node of the end-to-end tests (kubelet, containerd, runc, CNI plugins) where they can run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	bins, err := kubebuild.Ensure(ctx, kubebuild.Options{Progress: os.Stdout, Kubectl: *kubectl})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-binaries:", err)
		os.Exit(1)
	}
	if !*quiet {
		for _, name := range slices.Sorted(maps.Keys(bins)) {
			fmt.Printf("%-24s %s\n", name, bins[name])
		}
	}
	if *node {
		buildNode(ctx, *quiet)
	}
}

// buildNode builds the real node's binaries, or says why the end-to-end
// tests will skip on this machine; neither is an error for `make test`.
func buildNode(ctx context.Context, quiet bool) {
	if err := harness.RealNodeSupport(); err != nil {
		fmt.Printf("end-to-end tests (test/e2e) will skip: %v\n", err)
		return
	}
	bins, err := nodebuild.Ensure(ctx, nodebuild.Options{Progress: os.Stdout})
	var unavailable *nodebuild.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		fmt.Printf("end-to-end tests (test/e2e) will skip: %s\n", unavailable.Reason)
	case err != nil:
		fmt.Fprintln(os.Stderr, "kube-binaries:", err)
		os.Exit(1)
	case !quiet:
		for _, name := range slices.Sorted(maps.Keys(bins.Paths)) {
			fmt.Printf("%-24s %s\n", name, bins.Paths[name])
		}
	}
}
