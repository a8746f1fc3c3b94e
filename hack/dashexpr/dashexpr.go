// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package dashexpr reads the PromQL a Grafana dashboard's panels run
// (deployments/grafana/gpufrac.json), with its template variables
// substituted as Grafana would, so that tests and the demo can evaluate
// every panel against a real Prometheus. It reads the JSON as Grafana
// stores it, not through the generator's SDK, which stays in its own module.
package dashexpr

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Query is one query of one panel.
type Query struct {
	// Panel is the panel's title as written (a repeated panel's title
	// keeps its variable, e.g. "Memory of GPU $gpu").
	Panel string
	RefID string
	// Expr is the PromQL with every template variable substituted.
	Expr string
}

// Variable is one of the dashboard's query variables (pickers).
type Variable struct {
	Name string
	// Query is Grafana's variable query as written, e.g.
	// label_values(metric{node=~"$node"}, gpu_uuid).
	Query string
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type dashModel struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Type  string          `json:"type"`
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func load(path string) (dashModel, error) {
	var m dashModel
	data, err := os.ReadFile(path)
	if err != nil {
		return m, fmt.Errorf("reading the dashboard: %w", err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("dashboard %s: %w", path, err)
	}
	return m, nil
}

// Queries returns every panel query of the dashboard at path, rows'
// nested panels included, in the dashboard's order, with the template
// variables substituted from vars (names without the $, e.g. "node",
// "__rate_interval"). A variable the expression uses and vars lacks is an
// error: a renamed variable must not reach Prometheus as text.
func Queries(path string, vars map[string]string) ([]Query, error) {
	m, err := load(path)
	if err != nil {
		return nil, err
	}
	var out []Query
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr == "" {
					continue
				}
				expr, err := Substitute(t.Expr, vars)
				if err != nil {
					return fmt.Errorf("panel %q query %s: %w", p.Title, t.RefID, err)
				}
				out = append(out, Query{Panel: p.Title, RefID: t.RefID, Expr: expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(m.Panels); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dashboard %s: no panel has a query", path)
	}
	return out, nil
}

// Variables returns the dashboard's query variables.
func Variables(path string) ([]Variable, error) {
	m, err := load(path)
	if err != nil {
		return nil, err
	}
	var out []Variable
	for _, v := range m.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %s: query is neither a string nor {query}: %w", v.Name, err)
			}
			q = obj.Query
		}
		out = append(out, Variable{Name: v.Name, Query: q})
	}
	return out, nil
}

// variableRef matches Grafana's three spellings of a variable: ${name} (or
// ${name:format}), $name and [[name]]. PromQL has no $ of its own.
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// Substitute replaces every template variable of expr with its value.
func Substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		sub := variableRef.FindStringSubmatch(ref)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("template variables %s have no value (given: %s)", strings.Join(missing, ", "), keys(vars))
	}
	return out, nil
}

// labelValues is Grafana's label_values(selector, label) and
// label_values(label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(?:(.+?)\s*,\s*)?(\w+)\s*\)\s*$`)

// LabelValuesExpr turns a label_values variable query into PromQL that
// returns one series per value: group by (label) (selector). Grafana asks
// Prometheus's series API instead; this asks the same of the query API.
func LabelValuesExpr(query string, vars map[string]string) (expr, label string, err error) {
	m := labelValues.FindStringSubmatch(query)
	if m == nil {
		return "", "", fmt.Errorf("variable query %q is not label_values(...)", query)
	}
	sel := m[1]
	if sel == "" {
		sel = fmt.Sprintf(`{%s=~".+"}`, m[2])
	}
	sel, err = Substitute(sel, vars)
	if err != nil {
		return "", "", fmt.Errorf("variable query %q: %w", query, err)
	}
	return fmt.Sprintf("group by (%s) (%s)", m[2], sel), m[2], nil
}

func keys(m map[string]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, ", ")
}
