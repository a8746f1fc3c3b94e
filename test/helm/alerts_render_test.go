// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestPrometheusRuleCarriesTheRuleFile: alerts.enabled renders a
// PrometheusRule whose spec is deployments/prometheus/gpufrac-rules.yaml
// (the one rule file promtool tests, test/alerts), with the labels a
// Prometheus's ruleSelector asks for; by default there is none.
func TestPrometheusRuleCarriesTheRuleFile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deployments", "prometheus", "gpufrac-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t)
	for _, tc := range []struct {
		values map[string]any
		want   bool
	}{
		{values: map[string]any{}},
		{values: map[string]any{"alerts": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}}}, want: true},
	} {
		objs, _, err := render(ch, valueSet{name: "alerts", release: "gpu", namespace: "gpu-system", values: tc.values})
		if err != nil {
			t.Fatal(err)
		}
		rule := find(objs, "PrometheusRule", "gpu-gpufrac")
		if (rule != nil) != tc.want {
			t.Fatalf("values %v: PrometheusRule rendered %v, want %v (objects %v)", tc.values, rule != nil, tc.want, kinds(objs))
		}
		if rule == nil {
			continue
		}
		if rule.GetNamespace() != "gpu-system" || rule.GetLabels()["release"] != "kube-prometheus" || rule.GetLabels()["app.kubernetes.io/instance"] != "gpu" {
			t.Errorf("PrometheusRule %s/%s labels %v, want the release's namespace, release=kube-prometheus and the chart's labels", rule.GetNamespace(), rule.GetName(), rule.GetLabels())
		}
		if got := rule.Object["spec"]; !reflect.DeepEqual(got, want) {
			t.Errorf("PrometheusRule spec differs from the rule file:\n got %v\nwant %v", got, want)
		}
	}
}
