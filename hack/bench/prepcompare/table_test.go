// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePlugins(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in      []string
		wantErr string
		driver  string
	}{
		{in: []string{"gpufrac=" + bin}, driver: "gpufrac.dev"},
		{in: []string{"example=" + bin}, driver: "gpu.example.com"},
		{in: nil, wantErr: "at least one -plugin"},
		{in: []string{"gpufrac"}, wantErr: "want KIND[:LABEL]=BINARY"},
		{in: []string{"other=" + bin}, wantErr: `kind "other" is neither gpufrac nor example`},
		{in: []string{"gpufrac=" + bin + ".missing"}, wantErr: "no such file"},
	} {
		got, err := parsePlugins(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.in, err)
		case got[0].driver != tc.driver:
			t.Errorf("%v: driver %q, want %q", tc.in, got[0].driver, tc.driver)
		}
	}
}

func TestParsePluginsLabels(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := parsePlugins([]string{"gpufrac:json=" + bin, "gpufrac:proto=" + bin, "example=" + bin})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []pluginSpec{
		{kind: "gpufrac", label: "gpufrac:json", binary: bin, driver: "gpufrac.dev"},
		{kind: "gpufrac", label: "gpufrac:proto", binary: bin, driver: "gpufrac.dev"},
		{kind: "example", label: "example", binary: bin, driver: "gpu.example.com"},
	} {
		if got[i] != want {
			t.Errorf("spec %d: %+v, want %+v", i, got[i], want)
		}
	}
	if _, err := parsePlugins([]string{"other:x=" + bin}); err == nil || !strings.Contains(err.Error(), `kind "other"`) {
		t.Errorf("unknown kind behind a label: error %v", err)
	}
}

func TestTableRatiosAgainstTheLast(t *testing.T) {
	specs := []pluginSpec{{kind: "gpufrac", label: "a"}, {kind: "gpufrac", label: "b"}, {kind: "example", label: "c"}}
	st := func(perSec float64) stats { return stats{p50: time.Millisecond, p99: time.Millisecond, perSec: perSec} }
	results := []result{
		{label: "a", conc: 1, run: 1, prepare: st(100), unprepare: st(100)},
		{label: "b", conc: 1, run: 1, prepare: st(300), unprepare: st(100)},
		{label: "c", conc: 1, run: 1, prepare: st(200), unprepare: st(100)},
	}
	out := table(results, specs, []int{1}, 32, 20)
	if !strings.Contains(out, "| a / c claims/s | b / c claims/s |") {
		t.Fatalf("header lacks a ratio per plugin against the last:\n%s", out)
	}
	if !strings.Contains(out, "| Prepare, 1 | 100 | 1.00 | 1.00 | 300 | 1.00 | 1.00 | 200 | 1.00 | 1.00 | 0.50 | 1.50 |") {
		t.Errorf("Prepare row:\n%s", out)
	}
}

func TestTableRatiosPerRun(t *testing.T) {
	specs := []pluginSpec{{kind: "gpufrac", label: "gpufrac"}, {kind: "example", label: "example"}}
	st := func(perSec float64) stats {
		return stats{p50: time.Millisecond, p99: 2 * time.Millisecond, perSec: perSec}
	}
	results := []result{
		{label: "gpufrac", conc: 1, run: 1, prepare: st(100), unprepare: st(300)},
		{label: "example", conc: 1, run: 1, prepare: st(200), unprepare: st(100)},
		{label: "gpufrac", conc: 1, run: 2, prepare: st(150), unprepare: st(300)},
		{label: "example", conc: 1, run: 2, prepare: st(100), unprepare: st(300)},
	}
	out := table(results, specs, []int{1}, 32, 20)
	for _, want := range []string{
		"| Prepare, 1 | 100, 150 | 1.00, 1.00 | 2.00, 2.00 | 200, 100 | 1.00, 1.00 | 2.00, 2.00 | 0.50, 1.50 |",
		"| Unprepare, 1 | 300, 300 | 1.00, 1.00 | 2.00, 2.00 | 100, 300 | 1.00, 1.00 | 2.00, 2.00 | 3.00, 1.00 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
