// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpufrac/gpufrac/hack/dashexpr"
	"github.com/gpufrac/gpufrac/hack/prombin"
)

// dashboardTable is the file under demo/state/ with the Grafana
// dashboard's panels as evaluated on the demo's own metrics.
const dashboardTable = "dashboard-panels.txt"

// dashboardWatch is a real Prometheus (Debian's 2.42, hack/prombin)
// scraping every demo plugin's /metrics and gpufrac-controller's (the
// pools' fragmentation, the slices' ignored sizes) from the start, so that the
// dashboard's queries (deployments/grafana/gpufrac.json) can be evaluated
// over the whole demo at its end, borrowing and eviction included. err
// says why there is none (the package could not be fetched), and the
// table says so instead.
type dashboardWatch struct {
	srv   *prombin.Server
	start time.Time
	err   error
}

const dashboardScrape = time.Second

// startDashboardWatch starts the Prometheus on the plugins' metrics
// (metricsAddr, by node) and, where controllerAddr is set, on the
// controller's: it is scraped before the controller starts (the target is
// down until then), as targets cannot be added to a running server.
func startDashboardWatch(ctx context.Context, cluster string, metricsAddr map[string]string, controllerAddr string) *dashboardWatch {
	step("Starting a Prometheus (Debian's 2.42, fetched once into ~/.cache/gpufrac) on the plugins' and the controller's metrics, for the dashboard's panels")
	w := &dashboardWatch{start: time.Now()}
	bins, err := prombin.Fetch(ctx)
	if err != nil {
		w.err = err
		fmt.Printf("    no Prometheus, so no dashboard table: %v\n", err)
		return w
	}
	var targets []prombin.Target
	for _, node := range sortedKeys(metricsAddr) {
		targets = append(targets, prombin.Target{Job: "gpufrac-kubelet-plugin", URL: "http://" + metricsAddr[node] + "/metrics"})
	}
	if controllerAddr != "" {
		targets = append(targets, prombin.Target{Job: "gpufrac-controller", URL: "http://" + controllerAddr + "/metrics"})
	}
	dir := filepath.Join(cluster, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.err = err
		return w
	}
	w.srv, w.err = bins.Start(ctx, dir, prombin.ServerOptions{Targets: targets, ScrapeInterval: dashboardScrape})
	if w.err != nil {
		fmt.Printf("    Prometheus did not start, so no dashboard table: %v\n", w.err)
		return w
	}
	w.start = time.Now()
	fmt.Printf("    %s scraping %d targets (%d plugins, gpufrac-controller: %t) every %s (its data and log in %s)\n",
		w.srv.URL, len(targets), len(metricsAddr), controllerAddr != "", dashboardScrape, dir)
	return w
}

func (w *dashboardWatch) stop() {
	if w.srv != nil {
		w.srv.Stop()
	}
}

// writeTable evaluates every panel query of the dashboard, every node,
// GPU and namespace selected, over the demo so far, writes the table to
// state/dashboard-panels.txt and prints it.
func (w *dashboardWatch) writeTable(ctx context.Context, root, state string) error {
	step("The Grafana dashboard's panels on the demo's metrics (deployments/grafana/gpufrac.json, docs/dashboards.md)")
	path := filepath.Join(state, dashboardTable)
	var buf bytes.Buffer
	if w.err != nil {
		fmt.Fprintf(&buf, "no table: no Prometheus to evaluate the panels (%v)\n", w.err)
		fmt.Print(buf.String())
		return os.WriteFile(path, buf.Bytes(), 0o644)
	}
	// One scrape more, so the last state of the demo is stored.
	time.Sleep(2 * dashboardScrape)
	end := time.Now()
	span := end.Sub(w.start).Round(time.Second) + time.Minute
	vars := map[string]string{"node": ".*", "gpu": ".*", "namespace": ".*",
		"__rate_interval": "1m", "__range": fmt.Sprintf("%ds", int(span.Seconds()))}
	queries, err := dashexpr.Queries(filepath.Join(root, "deployments", "grafana", "gpufrac.json"), vars)
	if err != nil {
		return err
	}
	results := dashexpr.Evaluate(ctx, w.srv, queries, w.start, end, dashboardScrape)
	fmt.Fprintf(&buf, "# gpufrac's dashboard evaluated by %s over the demo's plugin and controller metrics, %s to %s (every %s);\n",
		"Prometheus 2.42", w.start.UTC().Format(time.TimeOnly), end.UTC().Format(time.TimeOnly), dashboardScrape)
	fmt.Fprintf(&buf, "# every node, GPU and namespace selected. SERIES: series with data in that time; NON-ZERO: of them, with a value other than 0 or NaN.\n")
	if err := dashexpr.WriteTable(&buf, results); err != nil {
		return err
	}
	fmt.Print(buf.String())
	fmt.Printf("    written to %s\n", path)
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
