// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command gen writes gpufrac's Grafana dashboard (docs/dashboards.md) from
// code: `make dashboards` runs it with the checked-in copies as arguments,
// deployments/grafana/gpufrac.json for import by hand and the chart's
// dashboards/gpufrac.json for its ConfigMap, so both carry the same bytes.
// It is a module of its own so that the Grafana Foundation SDK never
// becomes a dependency of gpufrac's binaries.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gen FILE... (each FILE receives the dashboard's JSON)")
		os.Exit(2)
	}
	data, err := Render()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for _, path := range os.Args[1:] {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
