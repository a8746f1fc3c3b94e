// Command kube-binaries builds (once per machine and recipe) the upstream
// binaries the integration tests and the demo run, and prints where they are.
// `make test` runs it first, so a cold build shows its progress on the
// terminal instead of inside go test's buffered output.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/gpufrac/gpufrac/test/kubebuild"
)

func main() {
	kubectl := flag.Bool("kubectl", false, "also build kubectl")
	quiet := flag.Bool("q", false, "print nothing when the binaries are already built")
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
}
