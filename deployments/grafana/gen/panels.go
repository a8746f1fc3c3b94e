// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

type panel = cog.Builder[dashboard.Panel]

// rows is the dashboard, top to bottom (docs/dashboards.md lists each
// panel and the series it reads).
func rows() []row {
	return []row{
		{"Overview", overview()},
		{"Memory per GPU", memoryPerGPU()},
		{"Fractions: used against request and limit", fractions()},
		{"Incidents and evictions", incidents()},
		{"Prepare and Unprepare", prepare()},
		{"MPS daemons and health", mpsAndHealth()},
		{"Cluster: fragmentation (gpufrac-controller)", cluster()},
	}
}

func statPanel(title, desc, unit string, th cog.Builder[dashboard.ThresholdsConfig], expr string) panel {
	return stat.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource()).
		Span(4).Height(4).Unit(unit).Thresholds(th).
		GraphMode(common.BigValueGraphModeArea).ColorMode(common.BigValueColorModeValue).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Targets(queries(target{expr: expr}))
}

func overview() []panel {
	green := thresholds("green")
	return []panel{
		statPanel("Claims prepared", "Claims the selected nodes' plugins have prepared.", "none", green,
			fmt.Sprintf("sum(gpufrac_claims_prepared{%s})", nodeSel)),
		statPanel("Guaranteed of offered", "Guaranteed (requested) GPU memory over the memory the selected GPUs offer to claims.", "percentunit",
			thresholds("green", 0.8, "yellow", 0.95, "orange"),
			fmt.Sprintf("sum(gpufrac_gpu_memory_guaranteed_bytes{%s}) / sum(gpufrac_gpu_memory_total_bytes{%s})", gpuSel, gpuSel)),
		statPanel("Unhealthy GPUs", "GPUs tainted unhealthy (XID, lost): no new claim lands on them, running ones keep them.", "none",
			thresholds("green", 1.0, "red"), fmt.Sprintf("sum(gpufrac_gpu_unhealthy{%s})", gpuSel)),
		statPanel("MPS daemons not ready", "MPS daemons that claims need and that do not answer their health check.", "none",
			thresholds("green", 1.0, "red"), fmt.Sprintf("sum(1 - gpufrac_mps_daemon_ready{%s})", gpuSel)),
		statPanel("Incidents in range", "GPU-memory incidents started in the time range, every kind (docs/incidents.md).", "none",
			thresholds("green", 1.0, "orange"), fmt.Sprintf("sum(increase(gpufrac_incidents_total{%s}[$__range]))", gpuSel)),
		statPanel("Quarantined checkpoint entries", "Checkpoint entries this plugin version keeps but does not act on (docs/operations.md).", "none",
			thresholds("green", 1.0, "red"), fmt.Sprintf("sum(gpufrac_checkpoint_quarantined_entries{%s})", nodeSel)),
	}
}

// memoryPerGPU: one stacked chart per GPU (the panel repeats for each
// value of $gpu) whose stack is the GPU's memory, guaranteed, burst room
// up to the limits and free, with the used memory and the limit sum drawn
// over it as lines; and one table row per GPU with the same figures.
func memoryPerGPU() []panel {
	unstacked := []dashboard.DynamicConfigValue{
		{Id: "custom.stacking", Value: map[string]any{"mode": "none", "group": "A"}},
		{Id: "custom.fillOpacity", Value: 0},
		{Id: "custom.lineWidth", Value: 2},
	}
	chart := timeseries.NewPanelBuilder().Title("Memory of GPU $gpu").
		Description("Stacked: guaranteed (sum of requests), burst room (limits above the requests, up to the GPU's memory) and free memory no limit reaches; together the memory the GPU offers. Lines: memory used by the GPU's containers, and the sum of the limits (above the stack when over-committed).").
		Datasource(datasource()).Repeat("gpu").RepeatDirection(dashboard.PanelRepeatDirectionH).MaxPerRow(3).
		Span(24).Height(8).Unit("bytes").Min(0).FillOpacity(60).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).
		Targets(queries(
			target{expr: gpuGuaranteed, legend: "guaranteed"},
			target{expr: burstRoom, legend: "burst room"},
			target{expr: freeBeyondLimits, legend: "free"},
			target{expr: gpuUsed, legend: "used"},
			target{expr: gpuLimitSum, legend: "limit sum"},
		)).
		OverrideByQuery("D", unstacked).
		OverrideByQuery("E", append(unstacked, dashboard.DynamicConfigValue{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}))
	gpus := table.NewPanelBuilder().Title("GPUs").
		Description("One row per GPU: memory offered to claims, guaranteed, the sum of the limits, used, over-commit (limits over memory) and health (1 = unhealthy).").
		Datasource(datasource()).Span(24).Height(8).Unit("bytes").
		Targets(queries(
			target{expr: gpuOffered, table: true},
			target{expr: gpuGuaranteed, table: true},
			target{expr: gpuLimitSum, table: true},
			target{expr: gpuUsed, table: true},
			target{expr: fmt.Sprintf("max by (node, gpu_uuid) (gpufrac_gpu_memory_overcommit_ratio{%s})", gpuSel), table: true},
			target{expr: fmt.Sprintf("max by (node, gpu_uuid) (gpufrac_gpu_unhealthy{%s})", gpuSel), table: true},
		)).
		Transformations(mergeTable(map[string]string{"Value #A": "offered", "Value #B": "guaranteed", "Value #C": "limit sum",
			"Value #D": "used", "Value #E": "over-commit", "Value #F": "unhealthy", "gpu_uuid": "GPU"})).
		OverrideByName("over-commit", []dashboard.DynamicConfigValue{{Id: "unit", Value: "percentunit"}}).
		OverrideByName("unhealthy", []dashboard.DynamicConfigValue{{Id: "unit", Value: "none"}})
	overcommit := timeseries.NewPanelBuilder().Title("Over-commit: limits over memory").
		Description("Sum of the hard limits over the GPU's memory. Above 1 the limits are burstable: a share above its request may be evicted when another needs its guarantee; the requests never exceed the memory.").
		Datasource(datasource()).Span(24).Height(8).Unit("percentunit").Min(0).
		Thresholds(thresholds("green", 1.0, "orange")).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed)).
		Targets(queries(target{expr: fmt.Sprintf("gpufrac_gpu_memory_overcommit_ratio{%s}", gpuSel), legend: "{{node}} {{device}}"}))
	return []panel{chart, gpus, overcommit}
}

func fractions() []panel {
	who := "{{namespace}}/{{claim}} on {{node}}"
	borrowing := bargauge.NewPanelBuilder().Title("Borrowing: used over request").
		Description("Each share's used memory over its guaranteed request. Above 100% the share borrows: that memory may be taken back (an MPS eviction) when another share needs its guarantee.").
		Datasource(datasource()).Span(12).Height(10).Unit("percentunit").Min(0).Max(2).
		Thresholds(thresholds("green", 1.0, "orange")).DisplayMode(common.BarGaugeDisplayModeGradient).
		Orientation(common.VizOrientationHorizontal).
		Targets(queries(target{expr: usedOverRequest, legend: who}))
	wall := bargauge.NewPanelBuilder().Title("Near the wall: used over limit").
		Description("Each share's used memory over its hard limit. At 100% its allocations fail (GPUMemoryAtHardLimit incidents).").
		Datasource(datasource()).Span(12).Height(10).Unit("percentunit").Min(0).Max(1).
		Thresholds(thresholds("green", 0.8, "orange", 0.95, "red")).DisplayMode(common.BarGaugeDisplayModeGradient).
		Orientation(common.VizOrientationHorizontal).
		Targets(queries(target{expr: usedOverLimit, legend: who}))
	tbl := table.NewPanelBuilder().Title("Fractions").
		Description("One row per share: the claim, its GPU, the guaranteed request, the hard limit, the memory its containers use, and used over request and over limit.").
		Datasource(datasource()).Span(24).Height(10).Unit("bytes").
		Targets(queries(
			target{expr: shareRequest, table: true},
			target{expr: shareLimit, table: true},
			target{expr: shareUsed, table: true},
			target{expr: usedOverRequest, table: true},
			target{expr: usedOverLimit, table: true},
		)).
		Transformations(mergeTable(map[string]string{"Value #A": "request", "Value #B": "limit", "Value #C": "used",
			"Value #D": "used / request", "Value #E": "used / limit", "gpu_uuid": "GPU"})).
		OverrideByRegexp("used / .*", []dashboard.DynamicConfigValue{{Id: "unit", Value: "percentunit"}})
	overTime := timeseries.NewPanelBuilder().Title("Used per fraction").
		Description("Memory used by each share's containers over time.").
		Datasource(datasource()).Span(24).Height(8).Unit("bytes").Min(0).
		Targets(queries(target{expr: shareUsed, legend: who}))
	return []panel{borrowing, wall, tbl, overTime}
}
