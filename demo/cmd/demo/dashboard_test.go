// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/hack/dashexpr"
	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// TestDashboardTableOnAPlugin: make demo's watch scrapes a plugin's
// /metrics and the controller's with a real Prometheus and writes one
// line per panel query, with the series it returned: here a plugin
// exposing only its prepared claims and a controller only its pool's GPUs
// in use, so those panels have a series and the others none.
func TestDashboardTableOnAPlugin(t *testing.T) {
	_, err := prombin.Fetch(t.Context())
	mustrun.Need(t, err == nil, fmt.Sprintf("Debian's prometheus 2.42 (%v)", err))
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE gpufrac_claims_prepared gauge")
		fmt.Fprintln(w, `gpufrac_claims_prepared{node="demo-node-1"} 3`)
	}))
	defer plugin.Close()
	controller := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE gpufrac_fragmentation_gpus_in_use gauge")
		fmt.Fprintln(w, `gpufrac_fragmentation_gpus_in_use{pool="NVIDIA H200"} 2`)
	}))
	defer controller.Close()
	state := t.TempDir()
	cluster := filepath.Join(state, "cluster")
	addr, controllerAddr := strings.TrimPrefix(plugin.URL, "http://"), strings.TrimPrefix(controller.URL, "http://")
	for _, a := range []string{addr, controllerAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			t.Fatal(err)
		}
	}
	w := startDashboardWatch(t.Context(), cluster, map[string]string{"demo-node-1": addr}, controllerAddr)
	defer w.stop()
	if w.err != nil {
		t.Fatal(w.err)
	}
	if err := w.srv.WaitScraped(t.Context(), 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := w.writeTable(t.Context(), "../../..", state); err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(state, dashboardTable))
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashexpr.Queries("../../../deployments/grafana/gpufrac.json", map[string]string{
		"node": ".*", "gpu": ".*", "namespace": ".*", "__rate_interval": "1m", "__range": "1m"})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(table), "\n")
	for _, q := range queries {
		found := false
		for _, l := range lines {
			rest, ok := strings.CutPrefix(l, q.Panel+" ")
			if f := strings.Fields(rest); ok && len(f) > 0 && f[0] == q.RefID {
				found = true
			}
		}
		if !found {
			t.Errorf("panel %q %s missing from the table:\n%s", q.Panel, q.RefID, table)
		}
	}
	// The table's row of a panel's query, its columns one space apart.
	row := func(panel, ref string) string {
		for _, l := range lines {
			rest, ok := strings.CutPrefix(l, panel+" ")
			if f := strings.Fields(rest); ok && len(f) > 0 && f[0] == ref {
				return panel + " " + strings.Join(f, " ")
			}
		}
		return ""
	}
	for _, want := range []struct{ panel, ref, row string }{
		{"Claims prepared", "A", "Claims prepared A 1 1"},
		{"Fragmentation by pool", "A", "Fragmentation by pool A 1 1"},
		{"Fragmentation by pool", "B", "Fragmentation by pool B 0 0"},
	} {
		if got := row(want.panel, want.ref); got != want.row {
			t.Errorf("the table's line %q, want %q:\n%s", got, want.row, table)
		}
	}
	if strings.Contains(string(table), "error:") {
		t.Errorf("a query failed:\n%s", table)
	}
}
