// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// docsQueries are the PromQL blocks of docs/metrics.md's "Joining the
// metrics", one query per paragraph of a block, in order.
func docsQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Joining the metrics\n")
	if !ok {
		t.Fatal(`docs/metrics.md has no "## Joining the metrics"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var out []string
	for block := range strings.SplitSeq(section, "```promql\n") {
		code, _, ok := strings.Cut(block, "```")
		if !ok {
			continue
		}
		for q := range strings.SplitSeq(code, "\n\n") {
			if q = strings.TrimSpace(q); q != "" {
				out = append(out, q)
			}
		}
	}
	return out
}

// TestJoiningQueriesInTheDocs evaluates every query docs/metrics.md
// gives for joining the metrics with promtool over the scenarios, and
// compares what Prometheus returns with the same join computed here from
// the scraped series: the situation the query is for finds what the
// scenario holds, and the healthy cluster finds nothing.
func TestJoiningQueriesInTheDocs(t *testing.T) {
	queries := docsQueries(t)
	if len(queries) != 7 {
		t.Fatalf("%d queries in the docs' joining section, want the 7 this test knows:\n%s", len(queries), strings.Join(queries, "\n---\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := prombin.Fetch(ctx)
	mustrun.Need(t, err == nil, fmt.Sprintf("Debian's prometheus package: %v", err))
	all := buildAll(t)
	last := func(name string) (int, step) {
		s := all[name].steps
		return len(s) - 1, s[len(s)-1]
	}
	count := func(m map[[3]string]float64, cond func(float64) bool) float64 {
		n := 0.0
		for _, v := range m {
			if cond(v) {
				n++
			}
		}
		return n
	}
	type check struct {
		scenario string
		step     int
		expr     string  // the docs' query, wrapped to one number
		want     float64 // 0: no result
	}
	var checks []check
	add := func(scenario string, at int, st step, expr string, want func(step) float64) {
		checks = append(checks, check{scenario, at, expr, want(st)})
		hi, hst := last("healthy")
		checks = append(checks, check{"healthy", hi, expr, want(hst)})
	}
	bi, bst := last("borrowing-near-full")
	add("borrowing-near-full", bi, bst, "count(("+queries[0]+") > 1)", func(st step) float64 {
		return count(usedOverShare(st, "gpufrac_fraction_memory_request_bytes"), func(v float64) bool { return v > 1 })
	})
	ai, ast := last("at-hard-limit")
	add("at-hard-limit", ai, ast, "count(("+queries[1]+") >= 0.98)", func(st step) float64 {
		return count(usedOverShare(st, "gpufrac_fraction_memory_limit_bytes"), func(v float64) bool { return v >= 0.98 })
	})
	add("borrowing-near-full", bi, bst, "sum("+queries[2]+")", func(st step) float64 {
		return count(usedOverShare(st, "gpufrac_fraction_memory_request_bytes"), func(v float64) bool { return v > 1 })
	})
	add("borrowing-near-full", bi, bst, "count(("+queries[3]+") >= 0.9)", func(st step) float64 {
		n := 0.0
		for _, v := range gpuFill(st) {
			if v >= 0.9 {
				n++
			}
		}
		return n
	})
	ui, ust := last("unhealthy-gpu-with-claims")
	add("unhealthy-gpu-with-claims", ui, ust, "sum("+queries[4]+")", func(st step) float64 {
		n := 0.0
		for _, u := range series(st, "gpufrac_gpu_unhealthy") {
			for _, r := range series(st, "gpufrac_fraction_memory_request_bytes") {
				if u.value == 1 && r.labels["node"] == u.labels["node"] && r.labels["gpu_uuid"] == u.labels["gpu_uuid"] {
					n++
				}
			}
		}
		return n
	})
	md := all["mps-daemon-not-ready"].steps
	add("mps-daemon-not-ready", 10, md[10], "sum("+queries[5]+")", func(st step) float64 {
		n := 0.0
		for _, r := range series(st, "gpufrac_mps_daemon_ready") {
			if r.value == 0 {
				n += sumOf(st, "gpufrac_mps_daemon_claims", func(l map[string]string) bool {
					return l["node"] == r.labels["node"] && l["gpu_uuid"] == r.labels["gpu_uuid"]
				})
			}
		}
		return n
	})
	checks = append(checks, check{"repeated-evictions", len(all["repeated-evictions"].steps) - 1, "count(" + queries[6] + ")", 1},
		check{"healthy", len(all["healthy"].steps) - 1, "count(" + queries[6] + ")", 0})

	dir := t.TempDir()
	rules := filepath.Join(dir, "none.yaml")
	if err := os.WriteFile(rules, []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := prombin.RuleTestFile{RuleFiles: []string{rules}, EvaluationInterval: prombin.Duration(interval)}
	for _, name := range Names() {
		input, err := inputSeries(all[name].sc)
		if err != nil {
			t.Fatal(err)
		}
		test := prombin.RuleTest{Interval: prombin.Duration(interval), InputSeries: input}
		for _, c := range checks {
			if c.scenario != name {
				continue
			}
			e := prombin.ExprTest{Expr: c.expr, EvalTime: prombin.Duration(time.Duration(c.step) * interval)}
			if c.want != 0 {
				e.ExpSamples = []prombin.ExpSample{{Labels: "{}", Value: c.want}}
			}
			test.ExprTests = append(test.ExprTests, e)
		}
		if len(test.ExprTests) > 0 {
			file.Tests = append(file.Tests, test)
		}
	}
	for _, c := range checks {
		if c.scenario != "healthy" && c.want == 0 {
			t.Errorf("%s at step %d: the scenario holds nothing for %s", c.scenario, c.step, c.expr)
		}
	}
	path, err := prombin.WriteRuleTest(dir, "joins_test.yaml", file)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := bins.TestRules(ctx, path); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// inputSeries is a scenario's scrapes as promtool input series, each
// plugin its own instance.
func inputSeries(sc Scenario) ([]prombin.Series, error) {
	var scrapes []prombin.Scrape
	for _, st := range sc.Steps {
		for i, target := range st.Targets {
			scrapes = append(scrapes, prombin.Scrape{At: st.At, Job: target.Job, Instance: fmt.Sprintf("%s-%d", target.Job, i), Text: target.Text})
		}
	}
	return prombin.InputSeries(sc.Interval, scrapes)
}
