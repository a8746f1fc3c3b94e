// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package packing

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// ChurnSeries is one churn phase of hack/bench/realsched (-churn): GPUs
// holding a share over the live lower bound, sampled at T seconds after
// the first event.
type ChurnSeries struct {
	Name string
	// Packing says which mode ran: "off" is drawn dashed, anything else
	// solid, so the two modes read apart in grey print too.
	Packing  string
	T, Ratio []float64
}

// churnColours cycle over the series, on's and off's alike.
var churnColours = []color.RGBA{
	colourGPUs,
	colourRisk,
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// ChurnChart draws each series' ratio over time into path (format by
// extension), with the goal as a grey dashed line across.
func ChurnChart(path, title string, series []ChurnSeries, goal float64) error {
	if len(series) == 0 {
		return fmt.Errorf("no churn phase to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the first event"
	p.Y.Label.Text = "GPUs holding a share / live lower bound"
	p.Y.Min = 1
	p.Legend.Top = true
	var tMin, tMax, rMax float64
	for i, s := range series {
		if len(s.T) != len(s.Ratio) || len(s.T) == 0 {
			return fmt.Errorf("churn series %q: %d times for %d ratios", s.Name, len(s.T), len(s.Ratio))
		}
		xys := make(plotter.XYs, len(s.T))
		for j := range s.T {
			xys[j] = plotter.XY{X: s.T[j], Y: s.Ratio[j]}
			tMin, tMax, rMax = min(tMin, s.T[j]), max(tMax, s.T[j]), max(rMax, s.Ratio[j])
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("churn series %q: %w", s.Name, err)
		}
		line.Color = churnColours[i%len(churnColours)]
		line.Width = vg.Points(1.5)
		if s.Packing == "off" {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(s.Name, line)
	}
	if goal > 0 {
		g, err := plotter.NewLine(plotter.XYs{{X: tMin, Y: goal}, {X: tMax, Y: goal}})
		if err != nil {
			return err
		}
		g.Color = colourBound
		g.Width = vg.Points(1)
		g.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		p.Add(g)
		p.Legend.Add(fmt.Sprintf("goal %.2fx", goal), g)
	}
	p.Add(plotter.NewGrid())
	p.Y.Max = max(rMax, goal) * 1.08
	if err := p.Save(chartWidth, chartHeight, path); err != nil {
		return fmt.Errorf("writing the chart %s: %w", filepath.Clean(path), err)
	}
	return nil
}
