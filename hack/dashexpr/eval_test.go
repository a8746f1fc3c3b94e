// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package dashexpr_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/hack/dashexpr"
	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/internal/mustrun"
	"github.com/gpufrac/gpufrac/test/promscenario"
)

const dashboard = "../../deployments/grafana/gpufrac.json"

// feeds names, for every panel of the dashboard, the scenario written to
// feed it, and whether there every query of the panel must return a
// series whose value is neither 0 nor NaN (a count that must have counted,
// a ratio that must be above 0), not only a series. A panel missing here
// fails the test: a new panel needs a scenario.
var feeds = map[string]struct {
	scenario string
	nonZero  bool
}{
	"Claims prepared":                     {"healthy", true},
	"Guaranteed of offered":               {"healthy", true},
	"Unhealthy GPUs":                      {"unhealthy-gpu-with-claims", true},
	"MPS daemons not ready":               {"mps-daemon-not-ready", true},
	"Incidents in range":                  {"repeated-evictions", true},
	"Quarantined checkpoint entries":      {"quarantined-checkpoint", true},
	"Memory of GPU $gpu":                  {"borrowing-near-full", false},
	"GPUs":                                {"borrowing-near-full", false},
	"Over-commit: limits over memory":     {"borrowing-near-full", true},
	"Borrowing: used over request":        {"borrowing-near-full", true},
	"Near the wall: used over limit":      {"at-hard-limit", true},
	"Fractions":                           {"borrowing-near-full", true},
	"Used per fraction":                   {"healthy", true},
	"Incidents by kind":                   {"borrowing-near-full", false},
	"Evictions and terminations by claim": {"repeated-evictions", true},
	"Incidents per claim in range":        {"repeated-evictions", true},
	"Prepare latency":                     {"healthy", false},
	"Unprepare latency":                   {"healthy", false},
	"Prepare errors by reason":            {"prepare-errors", true},
	"MPS daemons":                         {"mps-daemon-not-ready", false},
	"MPS daemons per node":                {"healthy", true},
	"Unhealthy GPUs and their claims":     {"unhealthy-gpu-with-claims", true},
	"Checkpoint quarantined entries":      {"quarantined-checkpoint", true},
	"Fragmentation by pool":               {"healthy", false},
	"GPUs with ignored sizes":             {"healthy", false},
}

// ranges are the time-range variables: wide enough for every sample the
// scenario's scrapes leave, as Grafana's would over the dashboard's range.
var ranges = map[string]string{"__rate_interval": "1m", "__range": "5m"}

func vars(node string) map[string]string {
	v := map[string]string{"node": node, "gpu": ".*", "namespace": ".*"}
	for k, r := range ranges {
		v[k] = r
	}
	return v
}

// TestEveryPanelHasDataInItsScenario: a real Prometheus (Debian's 2.42,
// hack/prombin) scrapes each scenario of test/promscenario, exposition
// text from the plugin's and the controller's real registries, served
// step by step over HTTP as the plugins and the controller; then every
// query of every panel, with All (".*") and then each node for $node,
// evaluated over the scenario's time as a dashboard's time range shows it,
// must return data in the scenario written to feed it, and the dashboard's
// node, GPU and namespace pickers must list values. A metric renamed in
// the code leaves its panels empty and fails here.
func TestEveryPanelHasDataInItsScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	// Not deferred: the parallel subtests run after this function returns.
	t.Cleanup(cancel)
	bins, err := prombin.Fetch(ctx)
	mustrun.Need(t, err == nil, fmt.Sprintf("Debian's prometheus 2.42 (%v)", err))
	all, err := dashexpr.Queries(dashboard, vars(".*"))
	if err != nil {
		t.Fatal(err)
	}
	byScenario := map[string][]dashexpr.Query{}
	for _, q := range all {
		f, ok := feeds[q.Panel]
		if !ok {
			t.Errorf("panel %q has no scenario in feeds: name the promscenario scenario that feeds it", q.Panel)
			continue
		}
		byScenario[f.scenario] = append(byScenario[f.scenario], q)
	}
	for name := range byScenario {
		t.Run(name, func(t *testing.T) {
			// Each scenario has its own Prometheus and targets; most of
			// the time is spent waiting for scrapes.
			t.Parallel()
			sc := scrapeScenario(ctx, t, bins, name)
			checkPanels(ctx, t, sc, byScenario[name])
			if name == "healthy" {
				checkPickers(ctx, t, sc.srv)
			}
		})
	}
}

// checkPanels evaluates the scenario's panels with every node and then
// with each node alone: some node must give each query data.
func checkPanels(ctx context.Context, t *testing.T, sc scraped, queries []dashexpr.Query) {
	for _, r := range sc.evaluate(ctx, queries) {
		want := feeds[r.Panel]
		switch {
		case r.Err != nil:
			t.Errorf("panel %q %s: %v\n%s", r.Panel, r.RefID, r.Err, r.Expr)
		case r.Series == 0:
			t.Errorf("panel %q %s returned no series in scenario %s:\n%s", r.Panel, r.RefID, want.scenario, r.Expr)
		case want.nonZero && r.NonZero == 0:
			t.Errorf("panel %q %s returned %d series, all 0 or NaN, in scenario %s:\n%s", r.Panel, r.RefID, r.Series, want.scenario, r.Expr)
		}
	}
	nodes, err := sc.srv.QueryVector(ctx, `group by (node) (gpufrac_gpu_memory_total_bytes)`)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("the scenario's nodes: %v (%d)", err, len(nodes))
	}
	seen := map[string]int{}
	for _, n := range nodes {
		node := string(n.Metric["node"])
		qs, err := dashexpr.Queries(dashboard, vars(node))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sc.evaluate(ctx, only(qs, queries)) {
			if r.Err != nil {
				t.Errorf("node %s, panel %q %s: %v", node, r.Panel, r.RefID, r.Err)
			}
			seen[r.Panel+" "+r.RefID] += r.Series
		}
	}
	for _, q := range queries {
		if seen[q.Panel+" "+q.RefID] == 0 {
			t.Errorf("panel %q %s returned no series for any single node (%d nodes)", q.Panel, q.RefID, len(nodes))
		}
	}
}

// only keeps the queries of qs that are in want (by panel and refId).
func only(qs, want []dashexpr.Query) []dashexpr.Query {
	keep := map[string]bool{}
	for _, q := range want {
		keep[q.Panel+" "+q.RefID] = true
	}
	var out []dashexpr.Query
	for _, q := range qs {
		if keep[q.Panel+" "+q.RefID] {
			out = append(out, q)
		}
	}
	return out
}

// checkPickers: every query variable of the dashboard lists values.
func checkPickers(ctx context.Context, t *testing.T, srv *prombin.Server) {
	vs, err := dashexpr.Variables(dashboard)
	if err != nil || len(vs) < 3 {
		t.Fatalf("variables %v, %v; want node, gpu and namespace", vs, err)
	}
	for _, v := range vs {
		expr, label, err := dashexpr.LabelValuesExpr(v.Query, vars(".*"))
		if err != nil {
			t.Error(err)
			continue
		}
		got, err := srv.QueryVector(ctx, expr)
		if err != nil || len(got) == 0 || got[0].Metric[model.LabelName(label)] == "" {
			t.Errorf("variable %s (%s) lists no %s: %v %v", v.Name, expr, label, got, err)
		}
	}
}

// scraped is a Prometheus that has scraped a scenario from start to end.
type scraped struct {
	srv        *prombin.Server
	start, end time.Time
}

// evaluate runs the queries over the scenario's whole time, every scrape.
func (s scraped) evaluate(ctx context.Context, queries []dashexpr.Query) []dashexpr.Result {
	return dashexpr.Evaluate(ctx, s.srv, queries, s.start, s.end, scrapeInterval)
}

// scrapeInterval compresses the scenario's steps (a minute each) so a
// scenario takes seconds; the panels' ranges ($__rate_interval, $__range)
// cover all of it.
const scrapeInterval = 200 * time.Millisecond

// scrapeScenario serves the scenario's targets over HTTP, each scrape of a
// target the next step of it (the last step repeated), starts Prometheus
// scraping them every scrapeInterval, and returns once every target has
// served every step and its last step twice, so the last step is stored.
func scrapeScenario(ctx context.Context, t *testing.T, bins prombin.Binaries, name string) scraped {
	t.Helper()
	sc, err := promscenario.Build(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Steps) == 0 {
		t.Fatalf("scenario %s has no steps", name)
	}
	type endpoint struct {
		served atomic.Int64
	}
	var targets []prombin.Target
	var endpoints []*endpoint
	for i, tg := range sc.Steps[0].Targets {
		ep := &endpoint{}
		endpoints = append(endpoints, ep)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			step := min(int(ep.served.Add(1))-1, len(sc.Steps)-1)
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			if i < len(sc.Steps[step].Targets) {
				_, _ = w.Write(sc.Steps[step].Targets[i].Text)
			}
		}))
		t.Cleanup(srv.Close)
		targets = append(targets, prombin.Target{Job: tg.Job, URL: srv.URL + "/metrics"})
	}
	start := time.Now()
	srv, err := bins.StartServer(ctx, t, prombin.ServerOptions{Targets: targets, ScrapeInterval: scrapeInterval})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(sc.Steps) + 2)
	deadline := time.Now().Add(time.Minute + time.Duration(want)*time.Second)
	for _, ep := range endpoints {
		for ep.served.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("scenario %s: a target served %d of %d scrapes in time", name, ep.served.Load(), want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return scraped{srv: srv, start: start, end: time.Now()}
}
