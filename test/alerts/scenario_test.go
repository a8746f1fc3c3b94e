// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package alerts_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/test/promscenario"
)

// built is one scenario as promtool reads it: its scrapes as input series
// (the last step held, as a node's state stays until it changes), and an
// index of its series to name what the alerts must name.
type built struct {
	sc     promscenario.Scenario
	series []prombin.Series
	end    time.Duration // the last step's time
	ix     index
}

// hold is how long the last step is held beyond the scenario: longer
// than every alert's for: plus an interval.
const hold = 20 * time.Minute

// scenarios caches each scenario's build (a second each) across the tests
// of this package.
var scenarios = struct {
	sync.Mutex
	built map[string]promscenario.Scenario
}{built: map[string]promscenario.Scenario{}}

func build(t *testing.T, name string) built {
	t.Helper()
	scenarios.Lock()
	sc, ok := scenarios.built[name]
	if !ok {
		var err error
		if sc, err = promscenario.Build(context.Background(), name); err != nil {
			scenarios.Unlock()
			t.Fatal(err)
		}
		scenarios.built[name] = sc
	}
	scenarios.Unlock()
	if len(sc.Steps) == 0 || sc.Interval <= 0 {
		t.Fatalf("scenario %s: %d steps every %s", name, len(sc.Steps), sc.Interval)
	}
	var scrapes []prombin.Scrape
	ix := index{}
	add := func(at time.Duration, tg promscenario.Target) {
		samples, err := prombin.Samples(tg.Text)
		if err != nil {
			t.Fatalf("scenario %s at %s, job %s: %v", name, at, tg.Job, err)
		}
		inst := instance(tg.Job, samples)
		ix.add(samples, inst)
		scrapes = append(scrapes, prombin.Scrape{At: at, Job: tg.Job, Instance: inst, Text: tg.Text})
	}
	for _, st := range sc.Steps {
		for _, tg := range st.Targets {
			add(st.At, tg)
		}
	}
	last := sc.Steps[len(sc.Steps)-1]
	for at := last.At + sc.Interval; at <= last.At+hold; at += sc.Interval {
		for _, tg := range last.Targets {
			add(at, tg)
		}
	}
	series, err := prombin.InputSeries(sc.Interval, scrapes)
	if err != nil {
		t.Fatalf("scenario %s: %v", name, err)
	}
	return built{sc: sc, series: series, end: last.At, ix: ix}
}

// instance names a target as Prometheus would tell the plugins apart: by
// its node (every plugin series carries it), the controller by its job.
func instance(job string, samples model.Vector) string {
	for _, s := range samples {
		if n, ok := s.Metric["node"]; ok && job == promscenario.JobPlugin {
			return string(n) + ":8080"
		}
	}
	return job
}

// index looks up, among every series of a scenario, a label of the series
// that match others: the UIDs and GPU UUIDs the scenario's simulated
// cluster made.
type index map[string][]model.Metric

func (ix index) add(samples model.Vector, inst string) {
	for _, s := range samples {
		m := s.Metric.Clone()
		m["instance"] = model.LabelValue(inst)
		ix[string(m[model.MetricNameLabel])] = append(ix[string(m[model.MetricNameLabel])], m)
	}
}

// lookup is label of the series of metric matching kv; it fails t unless
// exactly one value is found.
func (ix index) lookup(t *testing.T, metric, label string, kv ...string) string {
	t.Helper()
	var found []string
	for _, m := range ix[metric] {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			ok = ok && string(m[model.LabelName(kv[i])]) == kv[i+1]
		}
		if ok {
			found = append(found, string(m[model.LabelName(label)]))
		}
	}
	found = slices.Compact(slices.Sorted(slices.Values(found)))
	if len(found) != 1 {
		t.Fatalf("%s of %s%v: found %v, want one value", label, metric, kv, found)
	}
	return found[0]
}

func (ix index) claimUID(t *testing.T, ns, claim string) string {
	return ix.lookup(t, "gpufrac_fraction_memory_request_bytes", "claim_uid", "namespace", ns, "claim", claim)
}

func (ix index) gpuUUID(t *testing.T, node, device string) string {
	return ix.lookup(t, "gpufrac_gpu_memory_total_bytes", "gpu_uuid", "node", node, "device", device)
}

// firing is the alert written for a scenario and what it must fire with.
type firing struct {
	scenario, alert string
	// at is when it must be firing; zero means at the end, its cause held
	// for the alert's for: and an interval.
	at time.Duration
	// resolved: the scenario ends the cause, so the alert is silent again
	// at the end plus for: and an interval.
	resolved bool
	labels   func(t *testing.T, ix index) []map[string]string
}

func firings() []firing {
	return []firing{
		{scenario: "borrowing-near-full", alert: "GPUFracBorrowerNearEviction", labels: func(t *testing.T, ix index) []map[string]string {
			return []map[string]string{labels("severity", "warning", "node", "gpu-node-b", "device", "gpu-0", "gpu_uuid", ix.gpuUUID(t, "gpu-node-b", "gpu-0"),
				"namespace", "team-b", "claim", "infer", "claim_uid", ix.claimUID(t, "team-b", "infer"))}
		}},
		{scenario: "repeated-evictions", alert: "GPUFracRepeatedEvictions", labels: func(t *testing.T, ix index) []map[string]string {
			return []map[string]string{labels("severity", "warning", "node", "gpu-node-b", "gpu_uuid", ix.gpuUUID(t, "gpu-node-b", "gpu-0"),
				"namespace", "team-b", "claim", "infer", "claim_uid", ix.claimUID(t, "team-b", "infer"))}
		}},
		{scenario: "at-hard-limit", alert: "GPUFracContainerAtHardLimit", labels: func(t *testing.T, ix index) []map[string]string {
			uid := ix.claimUID(t, "team-b", "train")
			return []map[string]string{labels("severity", "warning", "job", promscenario.JobPlugin, "instance", "gpu-node-a:8080",
				"node", "gpu-node-a", "gpu_uuid", ix.gpuUUID(t, "gpu-node-a", "gpu-1"), "namespace", "team-b", "claim", "train", "claim_uid", uid,
				"pod", ix.lookup(t, "gpufrac_container_gpu_memory_used_bytes", "pod", "claim_uid", uid, "container", "trainer"), "container", "trainer")}
		}},
		{scenario: "mps-daemon-not-ready", alert: "GPUFracMPSDaemonNotReady", at: 15 * time.Minute, resolved: true, labels: func(t *testing.T, ix index) []map[string]string {
			return []map[string]string{labels("severity", "critical", "node", "gpu-node-a", "gpu_uuid", ix.gpuUUID(t, "gpu-node-a", "gpu-0"))}
		}},
		{scenario: "unhealthy-gpu-with-claims", alert: "GPUFracUnhealthyGPUWithClaims", labels: func(t *testing.T, ix index) []map[string]string {
			return []map[string]string{labels("severity", "critical", "node", "gpu-node-b", "device", "gpu-0", "gpu_uuid", ix.gpuUUID(t, "gpu-node-b", "gpu-0"), "reason", "XID 79")}
		}},
		{scenario: "prepare-errors", alert: "GPUFracPrepareErrors", labels: func(t *testing.T, ix index) []map[string]string {
			var out []map[string]string
			for _, reason := range []string{"invalid_claim", "no_mps"} {
				out = append(out, labels("severity", "warning", "job", promscenario.JobPlugin, "instance", "gpu-node-a:8080", "node", "gpu-node-a", "reason", reason))
			}
			return out
		}},
		{scenario: "quarantined-checkpoint", alert: "GPUFracCheckpointQuarantined", labels: func(t *testing.T, ix index) []map[string]string {
			return []map[string]string{labels("severity", "warning", "node", "gpu-node-b")}
		}},
	}
}

// labelsOnly writes the rule file without annotations: the scenarios check
// which alerts fire with which labels; TestAlertsSayWhatAndWhere checks the
// text word for word.
func labelsOnly(t *testing.T, dir string) string {
	t.Helper()
	f, _ := loadRules(t)
	for g := range f.Groups {
		for r := range f.Groups[g].Rules {
			f.Groups[g].Rules[r].Annotations = nil
		}
	}
	data, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules-labels-only.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func forOf(t *testing.T, alert string) time.Duration {
	t.Helper()
	_, rules := loadRules(t)
	for _, r := range rules {
		if r.Alert == alert {
			d, err := time.ParseDuration(r.For)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatalf("no alert %s", alert)
	return 0
}

// TestEachAlertFiresInItsScenario: over the scrapes the plugin's and the
// controller's real registries produced for the scenario written for it,
// promtool finds the alert firing with exactly the expected labels; silent
// at the start (the cause is the scripted one), and silent again where the
// scenario ends the cause.
func TestEachAlertFiresInItsScenario(t *testing.T) {
	b := fetch(t)
	dir := t.TempDir()
	rules := labelsOnly(t, dir)
	for _, f := range firings() {
		t.Run(f.scenario, func(t *testing.T) {
			sc := build(t, f.scenario)
			interval := sc.sc.Interval
			at := f.at
			if at == 0 {
				at = sc.end + forOf(t, f.alert) + interval
			}
			var exp []prombin.ExpAlert
			for _, l := range f.labels(t, sc.ix) {
				exp = append(exp, prombin.ExpAlert{ExpLabels: l})
			}
			tests := []prombin.AlertRuleTest{
				{EvalTime: prombin.Duration(at), Alertname: f.alert, ExpAlerts: exp},
				{EvalTime: 0, Alertname: f.alert},
			}
			if f.resolved {
				tests = append(tests, prombin.AlertRuleTest{EvalTime: prombin.Duration(sc.end + forOf(t, f.alert) + interval), Alertname: f.alert})
			}
			runPromtool(t, b, dir, f.scenario, rules, sc, tests)
		})
	}
}

// TestNoAlertFiresWhenHealthy: in the healthy scenario (claims within
// their requests, daemons ready, GPUs healthy, Prepares succeeding) no
// alert is firing at any minute, its last state held past every for:.
func TestNoAlertFiresWhenHealthy(t *testing.T) {
	b := fetch(t)
	dir := t.TempDir()
	sc := build(t, "healthy")
	var tests []prombin.AlertRuleTest
	for at := time.Duration(0); at <= sc.end+hold; at += sc.sc.Interval {
		for _, a := range alertNames {
			tests = append(tests, prombin.AlertRuleTest{EvalTime: prombin.Duration(at), Alertname: a})
		}
	}
	runPromtool(t, b, dir, "healthy", rulesFile, sc, tests)
}

func runPromtool(t *testing.T, b prombin.Binaries, dir, name, rules string, sc built, tests []prombin.AlertRuleTest) {
	t.Helper()
	path, err := prombin.WriteRuleTest(dir, name+".yaml", prombin.RuleTestFile{
		RuleFiles:          []string{rules},
		EvaluationInterval: prombin.Duration(sc.sc.Interval),
		Tests:              []prombin.RuleTest{{Interval: prombin.Duration(sc.sc.Interval), InputSeries: sc.series, AlertRuleTests: tests}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := b.TestRules(context.Background(), path); err != nil {
		t.Fatalf("scenario %s: %v\n%s", name, err, out)
	}
}

// TestAlertsReadOnlySeriesTheCodeExports: every gpufrac_ metric an alert
// reads is in the scenarios' scrapes, so a metric renamed in the code is
// named here (the scenario tests would only see an alert not firing).
func TestAlertsReadOnlySeriesTheCodeExports(t *testing.T) {
	exported := map[string]bool{}
	for _, name := range promscenario.Names() {
		sc := build(t, name)
		for metric := range sc.ix {
			exported[metric] = true
		}
	}
	_, rules := loadRules(t)
	for _, r := range rules {
		var missing []string
		for _, m := range readSeries(r) {
			if !exported[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s reads %s, which no scenario's scrape holds (renamed in the code?)", r.Alert, strings.Join(missing, ", "))
		}
		t.Logf("%s reads %s", r.Alert, strings.Join(readSeries(r), ", "))
	}
	if got := promscenario.Names(); !slices.Contains(got, "healthy") {
		t.Errorf("scenarios %v: no healthy one", got)
	}
	for _, f := range firings() {
		if !slices.Contains(promscenario.Names(), f.scenario) {
			t.Errorf("%s's scenario %q is not one of %v", f.alert, f.scenario, promscenario.Names())
		}
	}
}
