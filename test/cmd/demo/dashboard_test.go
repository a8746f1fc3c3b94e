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

	"github.com/gpufrac/gpufrac/test/dashexpr"
	"github.com/gpufrac/gpufrac/test/mustrun"
	"github.com/gpufrac/gpufrac/test/prombin"
)

// TestDashboardTableOnAPlugin: make demo's watch scrapes a plugin's
// /metrics with a real Prometheus and writes one line per panel query,
// with the series it returned: here a plugin exposing only its prepared
// claims, so that panel has a series and the others none.
func TestDashboardTableOnAPlugin(t *testing.T) {
	_, err := prombin.Fetch(t.Context())
	mustrun.Need(t, err == nil, fmt.Sprintf("Debian's prometheus 2.42 (%v)", err))
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE gpufrac_claims_prepared gauge")
		fmt.Fprintln(w, `gpufrac_claims_prepared{node="demo-node-1"} 3`)
	}))
	defer plugin.Close()
	state := t.TempDir()
	cluster := filepath.Join(state, "cluster")
	addr := strings.TrimPrefix(plugin.URL, "http://")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatal(err)
	}
	w := startDashboardWatch(t.Context(), cluster, map[string]string{"demo-node-1": addr})
	defer w.stop()
	if w.err != nil {
		t.Fatal(w.err)
	}
	if err := w.srv.WaitScraped(t.Context(), 1, time.Minute); err != nil {
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
	var claims string
	for _, l := range lines {
		if strings.HasPrefix(l, "Claims prepared ") {
			claims = strings.Join(strings.Fields(l), " ")
		}
	}
	if claims != "Claims prepared A 1 1" {
		t.Errorf("the table's Claims prepared line is %q, want one series, non-zero:\n%s", claims, table)
	}
	if strings.Contains(string(table), "error:") {
		t.Errorf("a query failed:\n%s", table)
	}
}
