package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/test/bench/packing/internal/packing"
)

// realschedRun is the part of a test/bench/realsched -o json line read
// here.
type realschedRun struct {
	Packing  string `json:"packing"`
	Nodes    int    `json:"nodes"`
	GPUs     string `json:"gpus"`
	Placed   int    `json:"placed"`
	Total    int    `json:"total"`
	GPUsUsed int    `json:"gpusUsed"`
}

// realschedNames label the real scheduler's modes in the table and chart.
var realschedNames = map[string]string{
	"off":      "real scheduler",
	"on":       "real sched. +packing",
	"extender": "real sched. +extender",
}

// realschedOutcomes reads realsched's JSON lines from path and keeps, for
// each mode, the first run of this trace (n pods of the h200x8 trace) on
// this many nodes; realsched's -trace runs use the same generator and
// seed 1 unless told otherwise, which the caller must keep equal.
func realschedOutcomes(path string, asks []simulate.Ask, nodes int, gpuBytes int64) ([]packing.Outcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-realsched: %w", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []packing.Outcome
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
		name, ok := realschedNames[r.Packing]
		if !ok || seen[r.Packing] || r.Nodes != nodes || r.Total != len(asks) || r.GPUs != "h200x8" {
			continue
		}
		o, err := packing.Measured(name, asks, r.Placed, r.GPUsUsed, gpuBytes)
		if err != nil {
			return nil, fmt.Errorf("-realsched %s:%d: %w", path, line, err)
		}
		seen[r.Packing] = true
		out = append(out, o)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-realsched: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-realsched %s: no run of %d pods on %d h200x8 nodes", path, len(asks), nodes)
	}
	return out, nil
}
