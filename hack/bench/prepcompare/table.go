// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
)

// table prints each figure per run (comma-separated, in run order) and the
// ratio of every plugin to the last one given, run by run.
func table(results []result, specs []pluginSpec, levels []int, claims, rounds int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d claims, %d rounds a run, one claim per call, runs alternating\n\n", claims, rounds)
	header := []string{"call, concurrency"}
	for _, s := range specs {
		header = append(header, s.label+" claims/s", s.label+" p50 ms", s.label+" p99 ms")
	}
	last := specs[len(specs)-1]
	for _, s := range specs[:len(specs)-1] {
		header = append(header, s.label+" / "+last.label+" claims/s")
	}
	fmt.Fprintf(&sb, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
	for _, call := range []string{"Prepare", "Unprepare"} {
		for _, conc := range levels {
			row := []string{fmt.Sprintf("%s, %d", call, conc)}
			perSec := map[string][]float64{}
			for _, s := range specs {
				var rate, p50, p99 []string
				for _, r := range results {
					if r.label != s.label || r.conc != conc {
						continue
					}
					st := r.prepare
					if call == "Unprepare" {
						st = r.unprepare
					}
					perSec[s.label] = append(perSec[s.label], st.perSec)
					rate = append(rate, fmt.Sprintf("%.0f", st.perSec))
					p50 = append(p50, fmt.Sprintf("%.2f", ms(st.p50)))
					p99 = append(p99, fmt.Sprintf("%.2f", ms(st.p99)))
				}
				row = append(row, strings.Join(rate, ", "), strings.Join(p50, ", "), strings.Join(p99, ", "))
			}
			for _, s := range specs[:len(specs)-1] {
				a, b := perSec[s.label], perSec[last.label]
				var ratios []string
				for i := range min(len(a), len(b)) {
					ratios = append(ratios, fmt.Sprintf("%.2f", a[i]/b[i]))
				}
				row = append(row, strings.Join(ratios, ", "))
			}
			fmt.Fprintf(&sb, "| %s |\n", strings.Join(row, " | "))
		}
	}
	return sb.String()
}
