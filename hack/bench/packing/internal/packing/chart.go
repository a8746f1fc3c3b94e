// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package packing

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Colours of the chart: GPUs used in blue, pods at risk in red so the one
// strategy that has them stands out, the lower bound as a grey dashed line.
var (
	colourGPUs   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colourRisk   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colourBound  = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	barWidth     = vg.Points(28)
	chartWidth   = 10 * vg.Inch
	chartHeight  = 4.5 * vg.Inch
	labelPadding = vg.Points(3)
)

// Chart draws the comparison as grouped bars, GPUs used and pods at risk
// per strategy, against the lower bound, into path; the format follows the
// extension (.png, .svg, .pdf). The title carries the trace so the picture
// stands on its own when it is copied out of docs/.
func Chart(path, title string, outcomes []Outcome, lowerBound int) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "count"
	p.Y.Min = 0
	p.Legend.Top = true

	names := make([]string, len(outcomes))
	used := make(plotter.Values, len(outcomes))
	risk := make(plotter.Values, len(outcomes))
	for i, o := range outcomes {
		// A parenthesis goes on a line of its own, so that nine labels fit.
		names[i] = strings.Replace(o.Strategy, " (", "\n(", 1)
		used[i] = float64(o.GPUsUsed)
		risk[i] = float64(o.AtRisk)
	}

	usedBars, err := bars(used, colourGPUs, -barWidth/2)
	if err != nil {
		return err
	}
	riskBars, err := bars(risk, colourRisk, barWidth/2)
	if err != nil {
		return err
	}
	// The bound spans the whole nominal axis (bars sit at 0..n-1).
	bound, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: float64(lowerBound)}, {X: float64(len(outcomes)) - 0.5, Y: float64(lowerBound)}})
	if err != nil {
		return err
	}
	bound.Color = colourBound
	bound.Width = vg.Points(1.5)
	bound.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}

	usedLabels, err := barLabels(used, -barWidth/2)
	if err != nil {
		return err
	}
	riskLabels, err := barLabels(risk, barWidth/2)
	if err != nil {
		return err
	}

	p.Add(usedBars, riskBars, bound, usedLabels, riskLabels, plotter.NewGrid())
	p.Legend.Add("GPUs used", usedBars)
	p.Legend.Add("pods at risk", riskBars)
	p.Legend.Add(fmt.Sprintf("lower bound (%d GPUs)", lowerBound), bound)
	p.NominalX(names...)
	// Headroom so the labels on the tallest bar stay inside the frame.
	_, _, _, ymax := usedBars.DataRange()
	p.Y.Max = ymax * 1.12

	if err := p.Save(chartWidth, chartHeight, path); err != nil {
		return fmt.Errorf("writing the chart %s: %w", filepath.Clean(path), err)
	}
	return nil
}

func bars(vs plotter.Values, c color.Color, offset vg.Length) (*plotter.BarChart, error) {
	b, err := plotter.NewBarChart(vs, barWidth)
	if err != nil {
		return nil, err
	}
	b.Color = c
	b.LineStyle.Width = 0
	b.Offset = offset
	return b, nil
}

// barLabels writes each bar's value above it, so the figures can be read
// off the picture without the table.
func barLabels(vs plotter.Values, offset vg.Length) (*plotter.Labels, error) {
	xys := make(plotter.XYs, len(vs))
	text := make([]string, len(vs))
	for i, v := range vs {
		xys[i] = plotter.XY{X: float64(i), Y: v}
		text[i] = strconv.Itoa(int(v))
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
	}
	l.Offset = vg.Point{X: offset, Y: labelPadding}
	return l, nil
}
