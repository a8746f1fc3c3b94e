// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"slices"
	"strings"
	"testing"
)

func TestRoundModesAlternate(t *testing.T) {
	for round, want := range map[int][]string{1: {"off", "on"}, 2: {"on", "off"}, 3: {"off", "on"}, 4: {"on", "off"}} {
		if got := roundModes(round, "on"); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
}

func TestCompareResults(t *testing.T) {
	phase := func(round int, mode string, rate float64) *result {
		return &result{Round: round, Packing: mode, Nodes: 64, Total: 400, PodsPerSecond: rate}
	}
	for _, tc := range []struct {
		name          string
		results       []*result
		ratios        []float64
		median, least float64
		err           string
	}{
		{
			name: "three rounds, either order",
			results: []*result{
				phase(1, "off", 100), phase(1, "on", 90),
				phase(2, "on", 70), phase(2, "off", 100),
				phase(3, "off", 80), phase(3, "on", 80),
			},
			ratios: []float64{0.9, 0.7, 1}, median: 0.9, least: 0.7,
		},
		{
			name:    "even count takes the lower middle",
			results: []*result{phase(1, "off", 100), phase(1, "on", 80), phase(2, "on", 90), phase(2, "off", 100)},
			ratios:  []float64{0.8, 0.9}, median: 0.8, least: 0.8,
		},
		{
			name:    "opted-out phases count as on",
			results: []*result{phase(1, "off", 100), phase(1, "on-opted-out", 95)},
			ratios:  []float64{0.95}, median: 0.95, least: 0.95,
		},
		{
			name:    "a round without both phases is left out",
			results: []*result{phase(1, "off", 100), phase(1, "on", 85), phase(2, "on", 10)},
			ratios:  []float64{0.85}, median: 0.85, least: 0.85,
		},
		{name: "nothing ran", err: "no phase ran"},
		{name: "nothing placed off", results: []*result{phase(1, "off", 0), phase(1, "on", 50)}, err: "no round has both phases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := compareResults(tc.results)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error with %q", c, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Packing != compare || c.Nodes != 64 || c.Total != 400 || c.Rounds != len(tc.ratios) {
				t.Errorf("summary %+v", c)
			}
			if !slices.EqualFunc(c.Ratios, tc.ratios, func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }) {
				t.Errorf("ratios %v, want %v", c.Ratios, tc.ratios)
			}
			if c.MedianRatio != tc.median || c.MinRatio != tc.least {
				t.Errorf("median %v, lowest %v; want %v, %v", c.MedianRatio, c.MinRatio, tc.median, tc.least)
			}
		})
	}
}

func TestCompareResultsCPU(t *testing.T) {
	phase := func(round int, mode string, cpu float64) *result {
		return &result{Round: round, Packing: mode, PodsPerSecond: 100, cpuFigures: cpuFigures{CPUPerPod: cpu}}
	}
	c, err := compareResults([]*result{
		phase(1, "off", 0.010), phase(1, "on", 0.012),
		phase(2, "on", 0.011), phase(2, "off", 0.010),
		phase(3, "off", 0.010), phase(3, "on", 0.013),
		phase(4, "on", 0.010), phase(4, "off", 0.010),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.CPURatios, []float64{1.2, 1.1, 1.3, 1}) || c.MedianCPURatio != 1.15 || c.MaxCPURatio != 1.3 ||
		!slices.Equal(c.OnFirst, []bool{false, true, false, true}) {
		t.Errorf("CPU ratios %v median %v max %v on first %v; want [1.2 1.1 1.3 1], 1.15 (mean of the middle two), 1.3, alternating",
			c.CPURatios, c.MedianCPURatio, c.MaxCPURatio, c.OnFirst)
	}
}
