// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fragmentation_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
)

// BenchmarkAnalyze1000Nodes is the controller's work per scrape at 1,000
// nodes of 8 H200 (141Gi) holding 1 to 4 shares of 8 to 40Gi on 70% of
// the GPUs.
func BenchmarkAnalyze1000Nodes(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int64{8, 16, 24, 40}
	var gpus []fragmentation.GPU
	for n := range 1000 {
		for d := range 8 {
			g := gpu("H200", fmt.Sprintf("node-%04d", n), fmt.Sprintf("gpu-%d", d), 141)
			if rng.IntN(10) < 7 {
				for range 1 + rng.IntN(4) {
					s := sizes[rng.IntN(len(sizes))] * gi
					if g.Guaranteed+s <= g.Capacity {
						g.Shares = append(g.Shares, s)
						g.Guaranteed += s
					}
				}
			}
			gpus = append(gpus, g)
		}
	}
	b.ResetTimer()
	var p []fragmentation.Pool
	for b.Loop() {
		p = fragmentation.Analyze(gpus)
	}
	b.ReportMetric(float64(p[0].InUse), "gpus-in-use")
	b.ReportMetric(float64(p[0].LowerBound), "lower-bound")
	b.ReportMetric(float64(p[0].Freeable), "freeable")
}
