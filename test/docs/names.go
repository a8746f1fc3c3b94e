// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

var (
	// A metric name in a page: not part of a path, a list in braces or a
	// longer identifier (the MPS daemon's gpufrac_mps_config directory).
	metricUse = regexp.MustCompile(`(?:^|[\s\x60(|"'])(gpufrac_[a-z0-9_]*[a-z0-9])`)
	// A metric name in Go source: the name of a prometheus.*Opts or Desc.
	metricDecl = regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(gpufrac_[a-z0-9_]+)"`)
	valuePath  = regexp.MustCompile(`^[a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)+$`)
	setFlag    = regexp.MustCompile(`--set(?:-string)?[ =]([a-zA-Z0-9.]+)=`)
	valueWord  = regexp.MustCompile("(?i)(?:chart value|values?) `([^`]+)`")
)

// GoMetrics returns the gpufrac_ metric names a Go source file registers.
func GoMetrics(src string) []string {
	var out []string
	for _, m := range metricDecl.FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	return out
}

// UnknownMetrics returns the gpufrac_ metric names a page uses that the
// code does not register. A histogram's _bucket, _sum and _count series
// count as its name.
func UnknownMetrics(page string, known map[string]bool) []Finding {
	var out []Finding
	for i, l := range skipGenerated(strings.Split(page, "\n")) {
		for _, m := range metricUse.FindAllStringSubmatch(l, -1) {
			name := m[1]
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suf)
			}
			if !known[name] && !known[base] {
				out = append(out, Finding{Line: i + 1, Name: name, Why: "no metric of that name is registered in the code"})
			}
		}
	}
	return sortFindings(out)
}

// ChartValues is the chart's values.yaml, with its schema, to look paths up in.
type ChartValues struct {
	values map[string]any
	schema map[string]any
}

// NewChartValues reads values.yaml and values.schema.json.
func NewChartValues(valuesYAML, schemaJSON []byte) (*ChartValues, error) {
	c := &ChartValues{}
	if err := yaml.Unmarshal(valuesYAML, &c.values); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if err := yaml.Unmarshal(schemaJSON, &c.schema); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	return c, nil
}

// Has reports whether path names a value of the chart: a key at every
// step, or a key below a free-form map (one whose schema declares no
// properties, such as a nodeSelector), where any key is the user's.
func (c *ChartValues) Has(path string) bool {
	var v any = c.values
	s := c.schema
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		props, _ := s["properties"].(map[string]any)
		if v, ok = m[p]; !ok {
			return props == nil && s != nil
		}
		s, _ = props[p].(map[string]any)
	}
	return true
}

// UnknownValues returns the chart value paths a page names that values.yaml
// does not have. What counts as naming a chart value:
//
//   - a code span of dotted names (`a.b`, `a.b.c`) whose first name is a
//     top-level key of values.yaml;
//   - a code span right after the words "value" or "chart value" (where a
//     wrong first name would otherwise pass as prose);
//   - the key of a --set or --set-string, in prose or in a code block.
//
// Other dotted spans (gpufrac.dev, status.devices, resource.k8s.io) are
// not chart values and are left alone.
func UnknownValues(page string, c *ChartValues) []Finding {
	var out []Finding
	for i, l := range skipGenerated(strings.Split(page, "\n")) {
		seen := map[string]bool{}
		check := func(path string) {
			if !seen[path] && !c.Has(path) {
				out = append(out, Finding{Line: i + 1, Name: path, Why: "not a value of the chart's values.yaml"})
			}
			seen[path] = true
		}
		for _, m := range setFlag.FindAllStringSubmatch(l, -1) {
			check(m[1])
		}
		for _, m := range valueWord.FindAllStringSubmatch(l, -1) {
			if valuePath.MatchString(m[1]) {
				check(m[1])
			}
		}
		for _, span := range codeSpan.FindAllString(l, -1) {
			span = strings.Trim(span, "`")
			first, _, _ := strings.Cut(span, ".")
			if _, top := c.values[first]; top && valuePath.MatchString(span) {
				check(span)
			}
		}
	}
	return sortFindings(out)
}

// TopLevelOnly is the chart with its top-level keys and nothing below
// them, a schema that declares every key: tests count with it how many
// paths a page names.
func (c *ChartValues) TopLevelOnly() *ChartValues {
	out := &ChartValues{values: map[string]any{}, schema: map[string]any{"properties": map[string]any{}}}
	props := out.schema["properties"].(map[string]any)
	for k := range c.values {
		out.values[k] = map[string]any{}
		props[k] = map[string]any{"properties": map[string]any{}}
	}
	return out
}
