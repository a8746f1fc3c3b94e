// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// dashboardJSON is the dashboard for import by hand; the chart's copy and
// its ConfigMap must carry the same bytes (deployments/grafana/gen writes
// both, and its test compares them with the generator).
var dashboardJSON = filepath.Join("..", "..", "deployments", "grafana", "gpufrac.json")

// TestDashboardConfigMapCarriesTheJSON: dashboards.enabled renders one
// ConfigMap labelled for Grafana's sidecar (the label configurable) whose
// gpufrac.json is byte for byte deployments/grafana/gpufrac.json; off by
// default, no ConfigMap.
func TestDashboardConfigMapCarriesTheJSON(t *testing.T) {
	want, err := os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t)
	objs, _, err := render(ch, valueSets()[0])
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "ConfigMap", "gpufrac-dashboard") != nil {
		t.Error("default values render the dashboard's ConfigMap; dashboards are off by default")
	}
	for _, tc := range []struct {
		values            map[string]any
		key, value, space string
	}{
		{map[string]any{"enabled": true}, "grafana_dashboard", "1", "gpufrac-system"},
		{map[string]any{"enabled": true, "label": "grafana.example.com/dashboard", "labelValue": "gpu",
			"namespace": "monitoring", "annotations": map[string]any{"grafana_folder": "GPUs"}},
			"grafana.example.com/dashboard", "gpu", "monitoring"},
	} {
		vs := valueSet{name: "dashboards", release: "gpufrac", namespace: "gpufrac-system",
			values: map[string]any{"dashboards": tc.values}}
		objs, _, err := render(ch, vs)
		if err != nil {
			t.Fatal(err)
		}
		cm := find(objs, "ConfigMap", "gpufrac-dashboard")
		if cm == nil {
			t.Fatalf("values %v: no ConfigMap gpufrac-dashboard (kinds %v)", tc.values, kinds(objs))
		}
		if got := cm.GetLabels()[tc.key]; got != tc.value {
			t.Errorf("values %v: label %s=%q, want %q", tc.values, tc.key, got, tc.value)
		}
		if cm.GetNamespace() != tc.space {
			t.Errorf("values %v: namespace %q, want %q", tc.values, cm.GetNamespace(), tc.space)
		}
		if ann, ok := tc.values["annotations"].(map[string]any); ok && cm.GetAnnotations()["grafana_folder"] != ann["grafana_folder"] {
			t.Errorf("values %v: annotations %v", tc.values, cm.GetAnnotations())
		}
		data, _ := cm.Object["data"].(map[string]any)
		got, _ := data["gpufrac.json"].(string)
		if !bytes.Equal([]byte(got), want) {
			t.Errorf("the ConfigMap's gpufrac.json (%d bytes) differs from %s (%d bytes): run `make dashboards`", len(got), dashboardJSON, len(want))
		}
	}
}

// TestServiceMonitorHonoursTheMetricsLabels: the ServiceMonitor keeps the
// fraction metrics' own namespace, pod and container labels (honorLabels),
// which the dashboard's and the alerts' matchers read.
func TestServiceMonitorHonoursTheMetricsLabels(t *testing.T) {
	objs, _, err := render(loadChart(t), valueSets()[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "ServiceMonitor" {
			continue
		}
		eps, _ := o.Object["spec"].(map[string]any)["endpoints"].([]any)
		for _, ep := range eps {
			if honor, _ := ep.(map[string]any)["honorLabels"].(bool); !honor {
				t.Errorf("ServiceMonitor %s endpoint %v: honorLabels not true", o.GetName(), ep)
			}
		}
		if len(eps) == 0 {
			t.Errorf("ServiceMonitor %s has no endpoints", o.GetName())
		}
		return
	}
	t.Fatal("value set 1 renders no ServiceMonitor")
}
