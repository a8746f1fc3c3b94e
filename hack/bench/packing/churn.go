// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/gpufrac/gpufrac/hack/bench/packing/internal/packing"
)

// churnRun is the part of a hack/bench/realsched -churn -o json line
// read here.
type churnRun struct {
	Packing    string  `json:"packing"`
	Round      int     `json:"round"`
	Nodes      int     `json:"nodes"`
	Population int     `json:"population"`
	Events     int     `json:"events"`
	Rate       float64 `json:"rate"`
	MeanRatio  float64 `json:"meanRatio"`
	P95Ratio   float64 `json:"p95Ratio"`
	MaxRatio   float64 `json:"maxRatio"`
	Settled    float64 `json:"settledRatio"`
	Samples    []struct {
		T          float64 `json:"t"`
		GPUs       int     `json:"gpus"`
		LowerBound int     `json:"lowerBound"`
	} `json:"samples"`
}

// churnGoal is the goal for the mean ratio under churn.
const churnGoal = 1.10

// churnChart reads realsched's churn phases from path and draws their
// ratio over time into chart, one line a phase, and prints their figures.
func churnChart(path, chart string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("-churn: %w", err)
	}
	defer func() { _ = f.Close() }()
	var series []packing.ChurnSeries
	var title string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "{") {
			continue
		}
		var r churnRun
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return fmt.Errorf("-churn %s:%d: %w", path, line, err)
		}
		if r.Events == 0 || len(r.Samples) == 0 {
			continue // a summary, or a placement line
		}
		s := packing.ChurnSeries{Name: fmt.Sprintf("%s, round %d (mean %.2f, p95 %.2f)", r.Packing, r.Round, r.MeanRatio, r.P95Ratio), Packing: r.Packing}
		for _, x := range r.Samples {
			if x.LowerBound == 0 {
				continue
			}
			s.T = append(s.T, x.T)
			s.Ratio = append(s.Ratio, float64(x.GPUs)/float64(x.LowerBound))
		}
		series = append(series, s)
		title = fmt.Sprintf("Churn in the real kube-scheduler: %d nodes, %d pods, %d events at %g/s", r.Nodes, r.Population, r.Events, r.Rate)
		fmt.Printf("%-4s round %d: mean %.2f  p95 %.2f  max %.2f  settled %.2f\n", r.Packing, r.Round, r.MeanRatio, r.P95Ratio, r.MaxRatio, r.Settled)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("-churn: %w", err)
	}
	if err := packing.ChurnChart(chart, title, series, churnGoal); err != nil {
		return err
	}
	fmt.Printf("Chart written to %s.\n", chart)
	return nil
}
