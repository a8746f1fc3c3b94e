// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/nodebuild"
)

var (
	cp   *harness.ControlPlane
	node *harness.RealNode
	// skipReason, when set, is why this machine cannot run the tests.
	skipReason string
	// metricsAddr is the plugin's --metrics-address on the real node.
	metricsAddr string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// requiredEnv, set to "required" (CI does as root), turns a skip into a
// failure: where the real node should run, a missing piece must not pass
// for a machine that cannot have one.
const requiredEnv = "GPUFRAC_E2E"

// skip records why the tests cannot run here; they then skip, unless
// requiredEnv says they must run.
func skip(m *testing.M, reason string) int {
	skipReason = reason
	if os.Getenv(requiredEnv) == "required" {
		fmt.Fprintf(os.Stderr, "e2e tests: %s=required, but they cannot run: %s\n", requiredEnv, reason)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e tests: skipped: %s\n", reason)
	return m.Run()
}

func run(m *testing.M) int {
	start := time.Now()
	if err := harness.RealNodeSupport(); err != nil {
		return skip(m, err.Error())
	}
	// The node's binaries first, before the control plane's clock starts:
	// on a fresh machine they take minutes (`make e2e` builds them
	// beforehand, with progress on the terminal).
	if _, err := nodebuild.Ensure(context.Background(), nodebuild.Options{Progress: os.Stderr}); err != nil {
		var unavailable *nodebuild.UnavailableError
		if errors.As(err, &unavailable) {
			return skip(m, unavailable.Reason)
		}
		fmt.Fprintf(os.Stderr, "e2e tests: building the node: %v\n", err)
		return 1
	}
	var err error
	cp, err = harness.Start(context.Background(), harness.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e tests: starting the control plane: %v\n", err)
		return 1
	}
	code := func() int {
		nodeStart := time.Now()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e tests: finding a port for the plugin's metrics: %v\n", err)
			return 1
		}
		metricsAddr = l.Addr().String()
		_ = l.Close()
		node, err = cp.AddRealNode(context.Background(), harness.RealNodeOptions{Name: "real1", GPUs: "h200x8",
			PluginArgs: []string{"--metrics-address=" + metricsAddr}})
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e tests: starting the real node: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e tests: control plane and real node ready in %s (node %s; adjusted for this machine: %v; state in %s)\n",
			time.Since(start).Round(100*time.Millisecond), time.Since(nodeStart).Round(100*time.Millisecond), node.Quirks, cp.Dir)
		return m.Run()
	}()
	peaks := cp.PeakRSS()
	if err := cp.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e tests: stopping the control plane and the node: %v\n", err)
		code = max(code, 1)
	}
	for _, name := range slices.Sorted(maps.Keys(peaks)) {
		fmt.Fprintf(os.Stderr, "  peak RSS %-24s %4d MiB\n", name, peaks[name]>>20)
	}
	fmt.Fprintf(os.Stderr, "e2e tests: %s in all\n", time.Since(start).Round(100*time.Millisecond))
	return code
}
