// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// step is one step's parsed targets.
type step = []map[string]*dto.MetricFamily

// usedOverShare is, per node/GPU/claim UID, what the claim's containers use
// over the share's figure (request or limit), as the documented join reads it.
func usedOverShare(st step, shareFamily string) map[[3]string]float64 {
	used := map[[3]string]float64{}
	for _, s := range series(st, "gpufrac_container_gpu_memory_used_bytes") {
		used[[3]string{s.labels["node"], s.labels["gpu_uuid"], s.labels["claim_uid"]}] += s.value
	}
	share := map[[3]string]float64{}
	for _, s := range series(st, shareFamily) {
		share[[3]string{s.labels["node"], s.labels["gpu_uuid"], s.labels["claim_uid"]}] += s.value
	}
	out := map[[3]string]float64{}
	for k, v := range used {
		if share[k] == 0 {
			continue
		}
		out[k] = v / share[k]
	}
	return out
}

// gpuFill is, per node/GPU, the containers' use over the GPU's memory.
func gpuFill(st step) map[[2]string]float64 {
	used := map[[2]string]float64{}
	for _, s := range series(st, "gpufrac_container_gpu_memory_used_bytes") {
		used[[2]string{s.labels["node"], s.labels["gpu_uuid"]}] += s.value
	}
	out := map[[2]string]float64{}
	for _, s := range series(st, "gpufrac_gpu_memory_total_bytes") {
		k := [2]string{s.labels["node"], s.labels["gpu_uuid"]}
		out[k] = used[k] / s.value
	}
	return out
}

func maxOf[K comparable](m map[K]float64) float64 {
	best := 0.0
	for _, v := range m {
		best = max(best, v)
	}
	return best
}

func sumOf(st step, family string, match func(map[string]string) bool) float64 {
	total := 0.0
	for _, s := range series(st, family) {
		if match == nil || match(s.labels) {
			total += s.value
		}
	}
	return total
}

// longest counts the longest run of consecutive steps where cond holds.
func longest(steps []step, cond func(step) bool) int {
	best, run := 0, 0
	for _, st := range steps {
		if cond(st) {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// TestScenariosAreWhatTheyAreNamed: each scenario holds the condition its
// alert is written for, over the time the alert needs, and the healthy
// one holds none of them, so an alert firing there is the alert's fault.
func TestScenariosAreWhatTheyAreNamed(t *testing.T) {
	all := buildAll(t)
	kind := func(k string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l["kind"] == k }
	}
	borrowingNearFull := func(st step) bool {
		return maxOf(usedOverShare(st, "gpufrac_fraction_memory_request_bytes")) > 1 && maxOf(gpuFill(st)) >= 0.9
	}
	atLimit := func(st step) bool { return maxOf(usedOverShare(st, "gpufrac_fraction_memory_limit_bytes")) >= 0.98 }
	daemonDown := func(st step) bool {
		return len(series(st, "gpufrac_mps_daemon_ready")) > 0 && sumOf(st, "gpufrac_mps_daemon_ready", nil) < float64(len(series(st, "gpufrac_mps_daemon_ready")))
	}
	unhealthyWithClaims := func(st step) bool {
		for _, u := range series(st, "gpufrac_gpu_unhealthy") {
			if u.value == 1 && sumOf(st, "gpufrac_fraction_memory_request_bytes", func(l map[string]string) bool {
				return l["node"] == u.labels["node"] && l["gpu_uuid"] == u.labels["gpu_uuid"]
			}) > 0 {
				return true
			}
		}
		return false
	}
	quarantined := func(st step) bool { return sumOf(st, "gpufrac_checkpoint_quarantined_entries", nil) > 0 }
	maxEvictions := func(st step) float64 {
		best := 0.0
		for _, s := range series(st, "gpufrac_fraction_incidents_total") {
			if s.labels["kind"] == "MPSClientEvicted" {
				best = max(best, s.value)
			}
		}
		return best
	}
	errorsAt := func(st step) float64 { return sumOf(st, "gpufrac_prepare_errors_total", nil) }

	checks := []struct {
		scenario string
		holds    func([]step) bool
		what     string
	}{
		{"borrowing-near-full", func(s []step) bool { return longest(s, borrowingNearFull) >= 5 }, "a borrower on a GPU at least 90% used, 5 steps on end"},
		{"repeated-evictions", func(s []step) bool {
			return maxEvictions(s[len(s)-1])-maxEvictions(s[len(s)-1-15]) >= 3
		}, "one claim evicted 3 times within 15 minutes"},
		{"at-hard-limit", func(s []step) bool { return longest(s, atLimit) >= 16 }, "a claim at 98% of its limit for 15 minutes"},
		{"mps-daemon-not-ready", func(s []step) bool { return longest(s, daemonDown) >= 11 }, "a needed daemon not ready for 10 minutes"},
		{"unhealthy-gpu-with-claims", func(s []step) bool { return longest(s, unhealthyWithClaims) >= 10 }, "claims on an unhealthy GPU"},
		{"prepare-errors", func(s []step) bool {
			return errorsAt(s[len(s)-1]) > errorsAt(s[len(s)-6]) && errorsAt(s[len(s)-6]) > errorsAt(s[3])
		}, "Prepare errors increasing"},
		{"quarantined-checkpoint", func(s []step) bool { return longest(s, quarantined) >= 10 }, "a quarantined checkpoint entry"},
	}
	for _, c := range checks {
		if !c.holds(all[c.scenario].steps) {
			t.Errorf("%s does not hold %s", c.scenario, c.what)
		}
	}
	for i, st := range all["healthy"].steps {
		switch {
		case maxOf(usedOverShare(st, "gpufrac_fraction_memory_request_bytes")) > 1:
			t.Errorf("healthy step %d: a claim borrows", i)
		case maxOf(usedOverShare(st, "gpufrac_fraction_memory_limit_bytes")) >= 0.9:
			t.Errorf("healthy step %d: a claim nears its limit", i)
		case sumOf(st, "gpufrac_fraction_incidents_total", nil) > 0 || sumOf(st, "gpufrac_incidents_total", kind("MPSClientEvicted")) > 0:
			t.Errorf("healthy step %d: incidents", i)
		case daemonDown(st), unhealthyWithClaims(st), quarantined(st), errorsAt(st) > 0:
			t.Errorf("healthy step %d: a daemon down, an unhealthy GPU, a quarantined entry or a Prepare error", i)
		case len(series(st, "gpufrac_container_gpu_memory_used_bytes")) < 5:
			t.Errorf("healthy step %d: %d container series", i, len(series(st, "gpufrac_container_gpu_memory_used_bytes")))
		}
	}
	// The healthy cluster's data: two nodes, four GPUs, shares on three.
	last := all["healthy"].steps[len(all["healthy"].steps)-1]
	if n := len(series(last, "gpufrac_gpu_memory_total_bytes")); n != 4 {
		t.Errorf("healthy: %d GPUs, want 4 on two nodes", n)
	}
	if n := len(series(last, "gpufrac_fraction_memory_request_bytes")); n != 5 {
		t.Errorf("healthy: %d shares at the end, want 5 (the batch job's went at Unprepare)", n)
	}
}
