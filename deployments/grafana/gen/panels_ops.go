// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// bars is a time series drawn as bars: counts per interval.
func bars(title, desc string, span uint32, ts ...target) panel {
	return timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource()).
		Span(span).Height(8).Unit("none").Min(0).DrawStyle(common.GraphDrawStyleBars).FillOpacity(80).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).
		Targets(queries(ts...))
}

func incidents() []panel {
	byKind := bars("Incidents by kind",
		"GPU-memory incidents started per interval, by kind: GPUMemoryBorrowing, GPUMemoryAtHardLimit, MPSClientEvicted, MPSClientTerminated, MPSClientWedged (docs/incidents.md).", 12,
		target{expr: fmt.Sprintf("sum by (kind) (increase(gpufrac_incidents_total{%s}[$__rate_interval]))", gpuSel), legend: "{{kind}}"})
	evictions := bars("Evictions and terminations by claim",
		"MPS clients evicted (their memory taken back for another share's guarantee) or terminated, per claim.", 12,
		target{expr: fmt.Sprintf(`sum by (namespace, claim, kind) (increase(gpufrac_fraction_incidents_total{%s, kind=~"MPSClientEvicted|MPSClientTerminated"}[$__rate_interval]))`, shareSel),
			legend: "{{namespace}}/{{claim}} {{kind}}"})
	perClaim := table.NewPanelBuilder().Title("Incidents per claim in range").
		Description("Incidents of each prepared claim in the time range, by kind. A claim's series end when it is unprepared.").
		Datasource(datasource()).Span(24).Height(8).Unit("none").
		Targets(queries(target{expr: fmt.Sprintf("sum by (namespace, claim, node, gpu_uuid, kind) (increase(gpufrac_fraction_incidents_total{%s}[$__range]))", shareSel), table: true})).
		Transformations(mergeTable(map[string]string{"Value #A": "incidents", "gpu_uuid": "GPU"}))
	return []panel{byKind, evictions, perClaim}
}

func latency(title, desc, metric string) panel {
	return timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(datasource()).
		Span(8).Height(8).Unit("s").Min(0).
		Targets(queries(
			target{expr: quantile(0.5, metric), legend: "p50"},
			target{expr: quantile(0.9, metric), legend: "p90"},
			target{expr: quantile(0.99, metric), legend: "p99"},
		))
}

// prepare: the plugin's Prepare and Unprepare histograms and error
// counter have no node label (one set per plugin process), so these
// panels sum over every plugin Prometheus scrapes.
func prepare() []panel {
	return []panel{
		latency("Prepare latency", "Time the plugins take to prepare one claim (NodePrepareResources, per claim), every result.", "gpufrac_prepare_duration_seconds"),
		latency("Unprepare latency", "Time the plugins take to unprepare one claim.", "gpufrac_unprepare_duration_seconds"),
		bars("Prepare errors by reason", "Failed Prepares per interval by reason (invalid_claim, mode_conflict, no_mps, internal); each is also a PrepareFailed Warning Event on the claim.", 8,
			target{expr: "sum by (reason) (increase(gpufrac_prepare_errors_total[$__rate_interval]))", legend: "{{reason}}"}),
	}
}

func mpsAndHealth() []panel {
	daemons := table.NewPanelBuilder().Title("MPS daemons").
		Description("One row per GPU served by an MPS daemon: ready (1) or not (0), and the claims using it.").
		Datasource(datasource()).Span(12).Height(8).Unit("none").
		Targets(queries(
			target{expr: fmt.Sprintf("max by (node, gpu_uuid) (gpufrac_mps_daemon_ready{%s})", gpuSel), table: true},
			target{expr: fmt.Sprintf("sum by (node, gpu_uuid) (gpufrac_mps_daemon_claims{%s})", gpuSel), table: true},
		)).
		Transformations(mergeTable(map[string]string{"Value #A": "ready", "Value #B": "claims", "gpu_uuid": "GPU"}))
	perNode := timeseries.NewPanelBuilder().Title("MPS daemons per node").
		Description("MPS control daemons each plugin runs.").
		Datasource(datasource()).Span(12).Height(8).Unit("none").Min(0).
		Targets(queries(target{expr: fmt.Sprintf("sum by (node) (gpufrac_mps_daemons{%s})", nodeSel), legend: "{{node}}"}))
	unhealthy := table.NewPanelBuilder().Title("Unhealthy GPUs and their claims").
		Description("GPUs tainted unhealthy, the taint's reason, and how many prepared shares they still hold (running claims keep their GPU).").
		Datasource(datasource()).Span(12).Height(8).Unit("none").
		Targets(queries(
			target{expr: fmt.Sprintf("max by (node, gpu_uuid, device, reason) (gpufrac_gpu_unhealthy{%s}) == 1", gpuSel), table: true},
			target{expr: fmt.Sprintf("count by (node, gpu_uuid) (gpufrac_fraction_memory_request_bytes{%s}) and on (node, gpu_uuid) (gpufrac_gpu_unhealthy{%s} == 1)", gpuSel, gpuSel), table: true},
		)).
		Transformations(mergeTable(map[string]string{"Value #A": "unhealthy", "Value #B": "claims", "gpu_uuid": "GPU"}))
	quarantined := timeseries.NewPanelBuilder().Title("Checkpoint quarantined entries").
		Description("Checkpoint entries kept but not acted on (written by a later version, or out of bounds); nothing they own is removed.").
		Datasource(datasource()).Span(12).Height(8).Unit("none").Min(0).
		Targets(queries(target{expr: fmt.Sprintf("gpufrac_checkpoint_quarantined_entries{%s}", nodeSel), legend: "{{node}}"}))
	return []panel{daemons, perNode, unhealthy, quarantined}
}

// cluster: gpufrac-controller's figures, per GPU pool (productName); they
// follow no node or GPU variable.
func cluster() []panel {
	frag := timeseries.NewPanelBuilder().Title("Fragmentation by pool").
		Description("Per GPU pool: GPUs holding a share, the fewest GPUs those shares could occupy, and GPUs that moving shares could free (docs/metrics.md#fragmentation).").
		Datasource(datasource()).Span(16).Height(8).Unit("none").Min(0).
		Targets(queries(
			target{expr: "sum by (pool) (gpufrac_fragmentation_gpus_in_use)", legend: "{{pool}} in use"},
			target{expr: "sum by (pool) (gpufrac_fragmentation_gpus_lower_bound)", legend: "{{pool}} lower bound"},
			target{expr: "sum by (pool) (gpufrac_fragmentation_gpus_freeable)", legend: "{{pool}} freeable"},
		))
	ignored := stat.NewPanelBuilder().Title("GPUs with ignored sizes").
		Description("GPUs whose published memory differs from what the other slices of their product agree on; admission and translation ignore those sizes (docs/security.md).").
		Datasource(datasource()).Span(8).Height(8).Unit("none").Thresholds(thresholds("green", 1.0, "orange")).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Targets(queries(target{expr: "sum(gpufrac_resourceslice_ignored_sizes)"}))
	return []panel{frag, ignored}
}
