// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package prombin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// CheckRules runs `promtool check rules` on the rule files: syntax, PromQL
// and templates as Prometheus 2.42 parses them.
func (b Binaries) CheckRules(ctx context.Context, files ...string) (string, error) {
	return b.promtool(ctx, append([]string{"check", "rules"}, files...)...)
}

// TestRules runs `promtool test rules` on unit-test files (RuleTestFile,
// written by WriteRuleTest). The output names every failing expectation
// with what Prometheus got instead.
func (b Binaries) TestRules(ctx context.Context, files ...string) (string, error) {
	return b.promtool(ctx, append([]string{"test", "rules"}, files...)...)
}

func (b Binaries) promtool(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, b.Promtool, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %v: %w:\n%s", args, err, out)
	}
	return string(out), nil
}

// RuleTestFile is promtool's unit-test file
// (https://prometheus.io/docs/prometheus/2.42/configuration/unit_testing_rules/).
type RuleTestFile struct {
	RuleFiles          []string   `json:"rule_files"`
	EvaluationInterval Duration   `json:"evaluation_interval,omitempty"`
	Tests              []RuleTest `json:"tests"`
}

// RuleTest is one test group: series sampled every Interval, and the
// alerts and expressions expected at given times.
type RuleTest struct {
	Interval       Duration          `json:"interval"`
	InputSeries    []Series          `json:"input_series"`
	AlertRuleTests []AlertRuleTest   `json:"alert_rule_test,omitempty"`
	ExprTests      []ExprTest        `json:"promql_expr_test,omitempty"`
	ExternalLabels map[string]string `json:"external_labels,omitempty"`
}

// Series is one input series in promtool's notation: `name{label="v"}`
// and values per interval ("1 2 _ stale": _ is no sample, stale a
// staleness marker, as Prometheus writes when a series leaves a scrape).
type Series struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// AlertRuleTest expects exactly ExpAlerts (none when empty) of Alertname
// to be firing at EvalTime.
type AlertRuleTest struct {
	EvalTime  Duration   `json:"eval_time"`
	Alertname string     `json:"alertname"`
	ExpAlerts []ExpAlert `json:"exp_alerts"`
}

// ExpAlert is one firing alert: its labels (the alert's own and the
// series', without alertname) and its rendered annotations, both exactly.
type ExpAlert struct {
	ExpLabels      map[string]string `json:"exp_labels,omitempty"`
	ExpAnnotations map[string]string `json:"exp_annotations,omitempty"`
}

// ExprTest expects Expr's result at EvalTime to be exactly ExpSamples.
type ExprTest struct {
	Expr       string      `json:"expr"`
	EvalTime   Duration    `json:"eval_time"`
	ExpSamples []ExpSample `json:"exp_samples"`
}

// ExpSample is one sample of an expression's result; Labels in series
// notation (`name{a="b"}`, or `{a="b"}` for a computed one).
type ExpSample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

// Duration is a time.Duration written as Prometheus writes durations
// ("1m30s").
type Duration time.Duration

// MarshalJSON writes the duration in Prometheus's notation.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + model.Duration(d).String() + `"`), nil
}

// WriteRuleTest writes f as YAML into dir and returns its path; rule files
// are made absolute, as promtool reads them relative to the test file.
func WriteRuleTest(dir, name string, f RuleTestFile) (string, error) {
	for i, r := range f.RuleFiles {
		abs, err := filepath.Abs(r)
		if err != nil {
			return "", err
		}
		f.RuleFiles[i] = abs
	}
	for i := range f.Tests {
		for j := range f.Tests[i].AlertRuleTests {
			if f.Tests[i].AlertRuleTests[j].ExpAlerts == nil {
				// An empty list, not null: "no alert fires".
				f.Tests[i].AlertRuleTests[j].ExpAlerts = []ExpAlert{}
			}
		}
	}
	data, err := yaml.Marshal(f)
	if err != nil {
		return "", fmt.Errorf("writing the promtool test %s: %w", name, err)
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, data, 0o644)
}
