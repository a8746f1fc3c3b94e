// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/hack/bench/packing/internal/packing"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

// realschedRun is the part of a hack/bench/realsched -o json line read
// here.
type realschedRun struct {
	Packing  string `json:"packing"`
	Nodes    int    `json:"nodes"`
	GPUs     string `json:"gpus"`
	Placed   int    `json:"placed"`
	Total    int    `json:"total"`
	GPUsUsed int    `json:"gpusUsed"`
	// Events is set on churn phases (-churn), which are not placements.
	Events int `json:"events"`
}

// realschedOrder is the modes' order in the table and chart.
var realschedOrder = map[string]int{"off": 0, "on": 1, "extender": 2}

// realschedNames label the real scheduler's modes in the table and chart.
var realschedNames = map[string]string{
	"off":      "real: scheduler",
	"on":       "real: +packing",
	"extender": "real: +extender",
}

// realschedOutcomes reads realsched's JSON lines from path and keeps, for
// each mode, the runs of this trace (n pods of the h200x8 trace) on this
// many nodes, charted as their median GPUs used (the lower middle run of
// an even count: one run of the same cluster varies by several GPUs under
// load, docs/design/packing.md). realsched's -trace runs use the same
// generator and seed 1 unless told otherwise, which the caller keeps equal.
func realschedOutcomes(path string, asks []simulate.Ask, nodes int, gpuBytes int64) ([]packing.Outcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-realsched: %w", err)
	}
	defer func() { _ = f.Close() }()
	used := map[string][]int{}
	var modes []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "{") {
			continue // realsched's table lines, or a label
		}
		var r realschedRun
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return nil, fmt.Errorf("-realsched %s:%d: %w", path, line, err)
		}
		if _, ok := realschedNames[r.Packing]; !ok || r.Events > 0 || r.Nodes != nodes || r.Total != len(asks) || r.GPUs != "h200x8" {
			continue
		}
		if r.Placed != r.Total {
			return nil, fmt.Errorf("-realsched %s:%d: %d of %d pods placed: only a whole trace compares", path, line, r.Placed, r.Total)
		}
		if used[r.Packing] == nil {
			modes = append(modes, r.Packing)
		}
		used[r.Packing] = append(used[r.Packing], r.GPUsUsed)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-realsched: %w", err)
	}
	if len(modes) == 0 {
		return nil, fmt.Errorf("-realsched %s: no run of %d pods on %d h200x8 nodes", path, len(asks), nodes)
	}
	slices.SortFunc(modes, func(a, b string) int { return realschedOrder[a] - realschedOrder[b] })
	out := make([]packing.Outcome, 0, len(modes))
	for _, m := range modes {
		runs := used[m]
		slices.Sort(runs)
		name := realschedNames[m]
		if len(runs) > 1 {
			name += fmt.Sprintf(" (median of %d)", len(runs))
		}
		o, err := packing.Measured(name, asks, len(asks), runs[(len(runs)-1)/2], gpuBytes)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}
