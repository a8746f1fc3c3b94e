// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/node/mps"
)

// BenchmarkDaemonStartUp measures the daemon start-up cost that is
// gpufrac's own, on the MPS double (whose own start is near-instant,
// unlike NVIDIA's daemon and server, whose share is for a GPU to measure):
// from the template script's start to its first namespace applied (FIFO,
// daemon start, start-up wait, safety limits, namespace listed, created,
// set and read back), against the baseline of one more namespace on the
// running daemon, both in the same run. The script looks at its settings
// once a second, which bounds the baseline.
func BenchmarkDaemonStartUp(b *testing.B) {
	toml, err := mps.DaemonTOML("615.23.01", "gpufrac", "GPU-a")
	if err != nil {
		b.Fatal(err)
	}
	var start, add time.Duration
	for i := 0; i < b.N; i++ {
		// startDaemon builds the double and runs the init container, then
		// starts the script and returns: the clock starts there.
		r := startDaemon(b, "v3", map[string]string{mps.NamespacesFile: "c_a 1024 100\n", mps.ConfigTOMLFile: toml})
		t0 := time.Now()
		r.applied(mps.NamespacesFile, "c_a 1024 100\n")
		start += time.Since(t0)
		t1 := time.Now()
		r.set(mps.NamespacesFile, "c_a 1024 100\nc_b 2048 50\n")
		r.applied(mps.NamespacesFile, "c_a 1024 100\nc_b 2048 50\n")
		add += time.Since(t1)
		r.stop()
	}
	n := time.Duration(b.N)
	b.Logf("\n%-62s %10s %7s\n%-62s %10s %7s\n%-62s %10s %7.2f",
		"phase (template script + MPS double, per run)", "mean", "ratio",
		"one more namespace on a running daemon (baseline)", (add / n).Round(time.Millisecond), "1.00",
		"script start to first namespace applied (daemon ready)", (start / n).Round(time.Millisecond), float64(start)/float64(add))
	b.ReportMetric(float64(start/n)/1e6, "start-ms")
	b.ReportMetric(float64(add/n)/1e6, "add-ns-ms")
}
