// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// cp is the control plane all tests of this package share: starting one
// takes about ten seconds, and tests keep apart through their own namespace,
// node and DeviceClasses.
var cp *harness.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	// Building the upstream binaries on a fresh machine happens here,
	// before m.Run starts the test timeout's clock; `make test` builds them
	// beforehand anyway, with progress on the terminal.
	var err error
	cp, err = harness.Start(context.Background(), harness.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration tests: starting the control plane: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "integration tests: control plane ready in %s (state in %s)\n", time.Since(start).Round(100*time.Millisecond), cp.Dir)
	// Packing tests register and remove the packing policy one after
	// another; before 1.37 the last removal would stop the API server's
	// parameter informer for good (harness.ReadsMissingParameters).
	if err := cp.KeepParameterInformer(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "integration tests: %v\n", err)
		_ = cp.Close()
		return 1
	}
	code := m.Run()
	peaks := cp.PeakRSS()
	if err := cp.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "integration tests: stopping the control plane: %v\n", err)
		code = max(code, 1)
	}
	var total uint64
	for _, name := range slices.Sorted(maps.Keys(peaks)) {
		fmt.Fprintf(os.Stderr, "  peak RSS %-24s %4d MiB\n", name, peaks[name]>>20)
		if name != "gpufrac-kubelet-plugin" {
			total += peaks[name]
		}
	}
	fmt.Fprintf(os.Stderr, "integration tests: control plane peak RSS (sum of per-process peaks) %d MiB; %s in all\n", total>>20, time.Since(start).Round(100*time.Millisecond))
	return code
}
