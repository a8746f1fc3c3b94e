// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package dashexpr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const dashboard = "../../deployments/grafana/gpufrac.json"

var all = map[string]string{"node": ".*", "gpu": ".*", "namespace": ".*", "__rate_interval": "1m", "__range": "5m"}

// TestEveryQueryIsSubstituted: the checked-in dashboard has queries, every
// one names a gpufrac metric, and no variable is left after substitution.
func TestEveryQueryIsSubstituted(t *testing.T) {
	qs, err := Queries(dashboard, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("%d queries; the dashboard has more", len(qs))
	}
	for _, q := range qs {
		if strings.Contains(q.Expr, "$") || strings.Contains(q.Expr, "[[") {
			t.Errorf("%s %s: variable left: %s", q.Panel, q.RefID, q.Expr)
		}
		if !strings.Contains(q.Expr, "gpufrac_") || q.Panel == "" || q.RefID == "" {
			t.Errorf("query %+v: want a panel, a refId and a gpufrac metric", q)
		}
	}
}

// TestMissingVariableIsAnError: an expression whose variable has no value
// is refused, naming the variable, rather than sent to Prometheus.
func TestMissingVariableIsAnError(t *testing.T) {
	_, err := Queries(dashboard, map[string]string{"node": ".*"})
	if err == nil || !strings.Contains(err.Error(), "gpu") {
		t.Fatalf("error %v; want one naming the missing variable gpu", err)
	}
}

func TestSubstituteSpellings(t *testing.T) {
	got, err := Substitute(`a{node=~"$node", x="${node:regex}", y="[[node]]"}[$__rate_interval]`, map[string]string{"node": "n1", "__rate_interval": "2m"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `a{node=~"n1", x="n1", y="n1"}[2m]`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestRowsAndVariables: a collapsed row's nested panels are read, and a
// label_values variable becomes a group-by query.
func TestRowsAndVariables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.json")
	doc := `{"panels": [{"type": "row", "title": "r", "panels": [{"type": "stat", "title": "inner", "targets": [{"refId": "A", "expr": "up{node=~\"$node\"}"}]}]}],
	  "templating": {"list": [{"type": "datasource", "name": "ds", "query": "prometheus"},
	    {"type": "query", "name": "gpu", "query": {"query": "label_values(m{node=~\"$node\"}, gpu_uuid)"}}]}}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	qs, err := Queries(path, map[string]string{"node": "n"})
	if err != nil || len(qs) != 1 || qs[0].Panel != "inner" || qs[0].Expr != `up{node=~"n"}` {
		t.Fatalf("queries %+v, %v", qs, err)
	}
	vs, err := Variables(path)
	if err != nil || len(vs) != 1 || vs[0].Name != "gpu" {
		t.Fatalf("variables %+v, %v", vs, err)
	}
	expr, label, err := LabelValuesExpr(vs[0].Query, map[string]string{"node": "n"})
	if err != nil || label != "gpu_uuid" || expr != `group by (gpu_uuid) (m{node=~"n"})` {
		t.Fatalf("got %q %q %v", expr, label, err)
	}
	if _, _, err := LabelValuesExpr("query_result(up)", nil); err == nil {
		t.Error("query_result accepted as label_values")
	}
}
