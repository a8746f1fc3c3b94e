// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package prombin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/internal/mustrun"
)

func fetch(t *testing.T) prombin.Binaries {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := prombin.Fetch(ctx)
	mustrun.Need(t, err == nil, fmt.Sprintf("Debian's prometheus package: %v", err))
	return b
}

func TestPromtoolVersion(t *testing.T) {
	b := fetch(t)
	for _, bin := range []string{b.Promtool, b.Prometheus} {
		got, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v: %s", bin, err, got)
		}
		if !strings.Contains(string(got), "version 2.42.0") {
			t.Errorf("%s --version says %q, want version 2.42.0", bin, got)
		}
	}
}

// TestPromtoolChecksAndTestsRules: a broken rule is refused, and a unit
// test's expectation is checked both ways (a wrong expectation fails).
func TestPromtoolChecksAndTestsRules(t *testing.T) {
	b := fetch(t)
	ctx := context.Background()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	write(t, rules, `groups:
- name: g
  rules:
  - alert: High
    expr: x > 1
    for: 1m
    labels: {severity: warning}
    annotations: {summary: "x is {{ $value }} on {{ $labels.instance }}"}
`)
	if _, err := b.CheckRules(ctx, rules); err != nil {
		t.Fatalf("check rules on a valid file: %v", err)
	}
	broken := filepath.Join(dir, "broken.yaml")
	write(t, broken, "groups:\n- name: g\n  rules:\n  - alert: Bad\n    expr: sum(x\n")
	if out, err := b.CheckRules(ctx, broken); err == nil {
		t.Fatalf("check rules accepted an unclosed parenthesis: %s", out)
	}
	series, err := prombin.InputSeries(time.Minute, []prombin.Scrape{
		{At: 0, Job: "j", Text: []byte("x 0\n")},
		{At: time.Minute, Job: "j", Text: []byte("x 2\n")},
		{At: 2 * time.Minute, Job: "j", Text: []byte("x 3\ny 1\n")},
		{At: 3 * time.Minute, Job: "j", Text: []byte("x 4\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := prombin.ExpAlert{
		ExpLabels:      map[string]string{"severity": "warning", "job": "j", "instance": "j"},
		ExpAnnotations: map[string]string{"summary": "x is 4 on j"},
	}
	for _, tc := range []struct {
		exp  []prombin.ExpAlert
		pass bool
	}{{[]prombin.ExpAlert{want}, true}, {nil, false}} {
		path, err := prombin.WriteRuleTest(dir, "test.yaml", prombin.RuleTestFile{
			RuleFiles: []string{rules},
			Tests: []prombin.RuleTest{{
				Interval:    prombin.Duration(time.Minute),
				InputSeries: series,
				// y left the scrape at 3m: stale there, so absent although
				// its last sample is within the five-minute lookback.
				ExprTests: []prombin.ExprTest{
					{Expr: "y", EvalTime: prombin.Duration(2 * time.Minute), ExpSamples: []prombin.ExpSample{{Labels: `y{job="j",instance="j"}`, Value: 1}}},
					{Expr: "y", EvalTime: prombin.Duration(3 * time.Minute)},
				},
				AlertRuleTests: []prombin.AlertRuleTest{
					{EvalTime: prombin.Duration(3 * time.Minute), Alertname: "High", ExpAlerts: tc.exp},
					// Pending, not firing, a minute in: no alert yet.
					{EvalTime: prombin.Duration(time.Minute), Alertname: "High"},
				},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := b.TestRules(ctx, path)
		if (err == nil) != tc.pass {
			t.Errorf("test rules expecting %d alerts: error %v, want pass=%v; output:\n%s", len(tc.exp), err, tc.pass, out)
		}
	}
}

// TestServerScrapesAndEvaluates starts Prometheus on an httptest target and
// reads a scraped series, a computed expression and a firing alert through
// its API, then stops it.
func TestServerScrapesAndEvaluates(t *testing.T) {
	b := fetch(t)
	var scrapes atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/custom/metrics" {
			http.NotFound(w, r)
			return
		}
		n := scrapes.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = fmt.Fprintf(w, "# TYPE demo_scrapes_total counter\ndemo_scrapes_total{node=\"n1\"} %d\n# TYPE demo_up gauge\ndemo_up 1\n", n)
	}))
	t.Cleanup(target.Close)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	write(t, rules, "groups:\n- name: g\n  rules:\n  - alert: DemoUp\n    expr: demo_up == 1\n    labels: {severity: info}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := b.StartServer(ctx, t, prombin.ServerOptions{
		Targets:        []prombin.Target{{Job: "demo", URL: target.URL + "/custom/metrics", Labels: map[string]string{"cluster": "c1"}}},
		ScrapeInterval: 200 * time.Millisecond,
		RuleFiles:      []string{rules},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitScraped(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	vec := waitVector(ctx, t, s, `demo_scrapes_total{job="demo",cluster="c1",node="n1"} > 1`)
	if v := float64(vec[0].Value); v < 2 || float64(scrapes.Load()) < v {
		t.Errorf("demo_scrapes_total = %v after %d scrapes", v, scrapes.Load())
	}
	waitVector(ctx, t, s, `count(up{job="demo"} == 1)`)
	var alerts []prombin.Alert
	for ctx.Err() == nil {
		if alerts, err = s.Alerts(ctx); err != nil {
			t.Fatal(err)
		}
		if len(alerts) == 1 && alerts[0].State == "firing" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(alerts) != 1 || alerts[0].Labels["alertname"] != "DemoUp" || alerts[0].Labels["cluster"] != "c1" || alerts[0].State != "firing" {
		t.Fatalf("alerts = %+v, want DemoUp firing with cluster=c1", alerts)
	}
	if _, err := s.Query(ctx, "sum(("); err == nil {
		t.Error("a malformed query returned no error")
	}
	s.Stop()
	if !s.Exited() {
		t.Error("the server is still running after Stop")
	}
}

func waitVector(ctx context.Context, t *testing.T, s *prombin.Server, expr string) model.Vector {
	t.Helper()
	for {
		vec, err := s.QueryVector(ctx, expr)
		if err != nil {
			t.Fatal(err)
		}
		if len(vec) > 0 {
			return vec
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: no result before the deadline", expr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInputSeriesLabelsAsAScrape: job and instance added (the target's own
// kept as exported_*), a histogram expanded, a gap where the target was not
// scraped, a staleness marker where it answered without the series.
func TestInputSeriesLabelsAsAScrape(t *testing.T) {
	hist := "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 2.5\nh_count 3\n"
	got, err := prombin.InputSeries(30*time.Second, []prombin.Scrape{
		{At: 0, Job: "a", Text: []byte("# TYPE g gauge\ng{job=\"own\"} 1e+11\n" + hist)},
		{At: 30 * time.Second, Job: "b", Instance: "i", Text: []byte("g 5\n")},
		{At: 60 * time.Second, Job: "a", Text: []byte(hist)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		`g{exported_job="own", instance="a", job="a"}`: "100000000000 _ stale",
		`g{instance="i", job="b"}`:                     "_ 5 _",
		`h_bucket{instance="a", job="a", le="1"}`:      "2 _ 2",
		`h_bucket{instance="a", job="a", le="+Inf"}`:   "3 _ 3",
		`h_sum{instance="a", job="a"}`:                 "2.5 _ 2.5",
		`h_count{instance="a", job="a"}`:               "3 _ 3",
		`up{instance="a", job="a"}`:                    "1 _ 1",
		`up{instance="i", job="b"}`:                    "_ 1 _",
	}
	if len(got) != len(want) {
		t.Errorf("got %d series, want %d: %+v", len(got), len(want), got)
	}
	for _, s := range got {
		if w, ok := want[s.Series]; !ok || w != s.Values {
			t.Errorf("series %s = %q, want %q (present: %v)", s.Series, s.Values, w, ok)
		}
	}
	if _, err := prombin.InputSeries(time.Minute, []prombin.Scrape{{At: 90 * time.Second, Job: "a"}}); err == nil {
		t.Error("a scrape between two intervals was accepted")
	}
}
