// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// UID is the dashboard's uid: stable, so an import replaces the previous
// version instead of adding a second dashboard.
const UID = "gpufrac"

// Label matchers every panel applies. The share and container metrics
// carry node, gpu_uuid and namespace; the GPU metrics node and gpu_uuid;
// the node-wide ones node only. The plugin's Prepare metrics carry none of
// them (they are per plugin process), so those panels follow no variable.
const (
	nodeSel  = `node=~"$node"`
	gpuSel   = `node=~"$node", gpu_uuid=~"$gpu"`
	shareSel = `node=~"$node", gpu_uuid=~"$gpu", namespace=~"$namespace"`
)

// Render builds the dashboard and returns its JSON as checked in.
func Render() ([]byte, error) {
	// The classic (v1) dashboard model, not dashboardv2: the dashboard
	// sidecar and Import load v1 JSON in every Grafana version, v2 only in
	// Grafana 12 with its feature flag on.
	//lint:ignore SA1019 v1 is the model every Grafana imports (above)
	//nolint:staticcheck // SA1019: v1 is the model every Grafana imports (above)
	b := dashboard.NewDashboardBuilder("gpufrac: GPU fractions").
		Uid(UID).
		Description("Memory-enforced GPU fractions: what each GPU offers, guarantees and uses, who borrows, incidents, Prepare, MPS daemons, health and fragmentation (docs/dashboards.md).").
		Tags([]string{"gpufrac", "gpu", "dra"}).
		Editable().
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair)
	for _, v := range variables() {
		b = b.WithVariable(v)
	}
	for _, row := range rows() {
		b = b.WithRow(dashboard.NewRowBuilder(row.title))
		for _, p := range row.panels {
			b = b.WithPanel(p)
		}
	}
	d, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("building the dashboard: %w", err)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the dashboard: %w", err)
	}
	return append(out, '\n'), nil
}

// row is one collapsible section of the dashboard and its panels, in
// reading order.
type row struct {
	title  string
	panels []cog.Builder[dashboard.Panel]
}

// datasource is the panels' data source: the dashboard's datasource
// variable, so the same JSON works with any Prometheus.
func datasource() common.DataSourceRef {
	typ, uid := "prometheus", "${datasource}"
	return common.DataSourceRef{Type: &typ, Uid: &uid}
}

// variables are the datasource, node, gpu and namespace pickers. The
// label_values queries read gpufrac's own series, so the pickers list
// only nodes and GPUs the plugin reports. Each allows several values and
// All (".*"), which is how the panels' =~ matchers read them.
func variables() []cog.Builder[dashboard.VariableModel] {
	ds := dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")
	pick := func(name, label, query string) cog.Builder[dashboard.VariableModel] {
		return dashboard.NewQueryVariableBuilder(name).
			Label(label).
			Datasource(datasource()).
			Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
			Definition(query).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			AllValue(".*")
	}
	return []cog.Builder[dashboard.VariableModel]{
		ds,
		pick("node", "Node", `label_values(gpufrac_gpu_memory_total_bytes, node)`),
		pick("gpu", "GPU", `label_values(gpufrac_gpu_memory_total_bytes{node=~"$node"}, gpu_uuid)`),
		pick("namespace", "Namespace", `label_values(gpufrac_fraction_memory_request_bytes{node=~"$node"}, namespace)`),
	}
}

// target is one query of a panel.
type target struct {
	expr, legend string
	// table: an instant query in table format (table panels, whose
	// queries are merged on their labels into one row per series).
	table bool
}

func query(ref string, t target) cog.Builder[variants.Dataquery] {
	q := prometheus.NewDataqueryBuilder().
		RefId(ref).
		Datasource(datasource()).
		Expr(t.expr)
	if t.legend != "" {
		q = q.LegendFormat(t.legend)
	}
	if t.table {
		q = q.Instant().Format(prometheus.PromQueryFormatTable)
	} else {
		q = q.Range()
	}
	return q
}

// queries turns targets into the panel's queries, refIds A, B, C, ...
func queries(ts ...target) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(ts))
	for i, t := range ts {
		out[i] = query(string(rune('A'+i)), t)
	}
	return out
}

// thresholds: base colour, then colour from each value up.
func thresholds(base string, steps ...any) cog.Builder[dashboard.ThresholdsConfig] {
	ts := []dashboard.Threshold{{Color: base}}
	for i := 0; i+1 < len(steps); i += 2 {
		v := steps[i].(float64)
		ts = append(ts, dashboard.Threshold{Value: &v, Color: steps[i+1].(string)})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(ts)
}

// mergeTable is a table's transformations: its queries' frames merged on
// their common labels into one row per series, the time column hidden.
func mergeTable(rename map[string]string) []dashboard.DataTransformerConfig {
	return []dashboard.DataTransformerConfig{
		{Id: "merge", Options: map[string]any{}},
		{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]any{"Time": true},
			"renameByName":  rename,
		}},
	}
}
