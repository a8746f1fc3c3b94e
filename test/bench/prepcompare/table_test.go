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
		{in: []string{"gpufrac"}, wantErr: "want KIND=BINARY"},
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

func TestTableRatiosPerRun(t *testing.T) {
	specs := []pluginSpec{{kind: "gpufrac"}, {kind: "example"}}
	st := func(perSec float64) stats {
		return stats{p50: time.Millisecond, p99: 2 * time.Millisecond, perSec: perSec}
	}
	results := []result{
		{kind: "gpufrac", conc: 1, run: 1, prepare: st(100), unprepare: st(300)},
		{kind: "example", conc: 1, run: 1, prepare: st(200), unprepare: st(100)},
		{kind: "gpufrac", conc: 1, run: 2, prepare: st(150), unprepare: st(300)},
		{kind: "example", conc: 1, run: 2, prepare: st(100), unprepare: st(300)},
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
