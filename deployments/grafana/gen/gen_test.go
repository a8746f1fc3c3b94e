// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// checkedIn are the copies `make dashboards` writes: the file for import by
// hand and the chart's, which its ConfigMap carries.
var checkedIn = []string{"../gpufrac.json", "../../helm/gpufrac/dashboards/gpufrac.json"}

// TestCheckedInDashboardIsGenerated: both checked-in copies are byte for
// byte what the generator writes now, so the JSON cannot drift from the
// code (run `make dashboards` after changing a panel).
func TestCheckedInDashboardIsGenerated(t *testing.T) {
	want, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range checkedIn {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run `make dashboards`)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output: run `make dashboards`", path)
		}
	}
}

// TestPanelsHaveQueriesAndDoNotOverlap: every panel but the rows has at
// least one query with an expression and a description, refIds are unique
// within a panel, and no two panels share a grid cell (the builder lays
// panels out left to right; a too-wide one would overlap the next).
func TestPanelsHaveQueriesAndDoNotOverlap(t *testing.T) {
	data, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type, Title, Description string
			GridPos                  struct{ X, Y, W, H int }
			Targets                  []struct{ RefID, Expr string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	cells := map[[2]int]string{}
	panels := 0
	for _, p := range d.Panels {
		g := p.GridPos
		if g.X+g.W > 24 {
			t.Errorf("panel %q runs past the grid's 24 columns: %+v", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at (%d,%d)", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		panels++
		if p.Description == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q: description %q, %d queries; want both", p.Title, p.Description, len(p.Targets))
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.Expr == "" || refs[q.RefID] {
				t.Errorf("panel %q: query %q empty or refId repeated", p.Title, q.RefID)
			}
			refs[q.RefID] = true
		}
	}
	if panels < 20 {
		t.Errorf("%d panels; the dashboard has at least 20", panels)
	}
}
