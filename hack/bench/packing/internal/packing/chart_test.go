// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package packing_test

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/hack/bench/packing/internal/packing"
)

func TestChartWritesAPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "packing.png")
	outcomes := []packing.Outcome{
		{Strategy: "whole GPU", GPUsUsed: 7},
		{Strategy: "time-slicing x4", GPUsUsed: 2, AtRisk: 4},
		{Strategy: "gpufrac", GPUsUsed: 3},
	}
	if err := packing.Chart(path, "test", outcomes, 3); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Errorf("chart is %v, too small to read", b)
	}
}

func TestChurnChartWritesAPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "churn.png")
	series := []packing.ChurnSeries{
		{Name: "off", Packing: "off", T: []float64{0, 1, 2}, Ratio: []float64{1.4, 1.5, 1.6}},
		{Name: "on", Packing: "on", T: []float64{0, 1, 2}, Ratio: []float64{1.03, 1.1, 1.12}},
	}
	if err := packing.ChurnChart(path, "test", series, 1.1); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("the churn chart is not a PNG: %v", err)
	}
	if err := packing.ChurnChart(path, "test", nil, 1.1); err == nil {
		t.Error("a chart of no series was drawn")
	}
	bad := []packing.ChurnSeries{{Name: "x", T: []float64{0, 1}, Ratio: []float64{1}}}
	if err := packing.ChurnChart(path, "test", bad, 1.1); err == nil {
		t.Error("a series with more times than ratios was drawn")
	}
}
