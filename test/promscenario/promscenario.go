// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package promscenario produces what Prometheus would scrape from gpufrac
// in named situations, step by step: the exposition text of the kubelet
// plugins' and the controller's real registries. The plugin side is the
// real fractionmetrics collector (share, container, GPU, health and MPS
// series, the Prepare/Unprepare metrics, the checkpoint quarantine gauge)
// reading container records and go-nvml's mock NVML server as a simulated
// node builds it (internal/sim/gpusim), with the real incident Detector,
// NVMLSource and Emitter counting incidents; the controller side is its
// real cluster metrics (internal/controller.RegisterClusterMetrics) over a
// fake clientset holding the slices the plugins would publish and the
// claims the scheduler allocated. What a scenario scripts is the world:
// which claims are prepared, what their containers use, which Prepares
// fail, which GPUs fail, whether an MPS daemon answers, what MPS evicts.
// The alert, dashboard and memory-map tests evaluate their queries over
// these steps, so renaming a metric in the code breaks them.
package promscenario

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Jobs of the targets, as the chart's ServiceMonitor names them.
const (
	JobPlugin     = "gpufrac-kubelet-plugin"
	JobController = "gpufrac-controller"
)

// Target is one scrape: Job is "gpufrac-kubelet-plugin" or
// "gpufrac-controller", Text the exposition in Prometheus's text format.
// Several targets of one job in a step are distinct instances (one plugin
// per node), as Prometheus would tell them apart with its instance label.
type Target struct {
	Job  string
	Text []byte
}

// Step is every target's scrape At a time since the scenario began.
type Step struct {
	At      time.Duration
	Targets []Target
}

// Scenario is a named situation scraped every Interval.
type Scenario struct {
	Name     string
	Interval time.Duration
	Steps    []Step
}

// scenario scripts one situation on a world.
type scenario struct {
	// promises are the metric families the scenario's last step holds;
	// its test fails if one goes missing (a rename in the code).
	promises []string
	steps    int
	script   func(w *world, step int)
}

// plugin and controller families every scenario has.
var (
	baseFamilies = []string{
		"gpufrac_fraction_memory_request_bytes", "gpufrac_fraction_memory_limit_bytes",
		"gpufrac_container_gpu_memory_used_bytes", "gpufrac_container_sm_utilization_percent", "gpufrac_gpu_memory_total_bytes",
		"gpufrac_gpu_memory_guaranteed_bytes", "gpufrac_gpu_memory_limit_sum_bytes",
		"gpufrac_gpu_memory_overcommit_ratio", "gpufrac_claims_prepared", "gpufrac_gpu_unhealthy",
		"gpufrac_fraction_incidents_total", "gpufrac_prepare_duration_seconds", "gpufrac_prepare_errors_total",
		"gpufrac_checkpoint_quarantined_entries", "gpufrac_mps_daemons", "gpufrac_mps_daemon_claims",
		"gpufrac_mps_daemon_ready", "gpufrac_fragmentation_gpus_in_use", "gpufrac_fragmentation_gpus_lower_bound",
		"gpufrac_fragmentation_gpus_freeable", "gpufrac_resourceslice_ignored_sizes",
	}
)

// Names lists the scenarios.
func Names() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Build runs the named scenario and returns its scrapes.
func Build(ctx context.Context, name string) (Scenario, error) {
	sc, ok := scenarios[name]
	if !ok {
		return Scenario{}, fmt.Errorf("scenario %q: not one of %v", name, Names())
	}
	w, err := newWorld(ctx)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario %q: %w", name, err)
	}
	defer w.close()
	out := Scenario{Name: name, Interval: interval}
	for i := range sc.steps {
		w.now = start.Add(time.Duration(i) * interval)
		if err := run(sc.script, w, i); err != nil {
			return Scenario{}, fmt.Errorf("scenario %q step %d: %w", name, i, err)
		}
		targets, err := w.scrape(ctx)
		if err != nil {
			return Scenario{}, fmt.Errorf("scenario %q step %d: %w", name, i, err)
		}
		out.Steps = append(out.Steps, Step{At: time.Duration(i) * interval, Targets: targets})
	}
	return out, nil
}

// run runs one step of a script, returning the world's failure (must).
func run(script func(*world, int), w *world, step int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			se, ok := r.(scriptError)
			if !ok {
				panic(r)
			}
			err = se.error
		}
	}()
	script(w, step)
	return nil
}
