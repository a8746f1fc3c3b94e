// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/dashexpr"
	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/mustrun"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// The shipped dashboard and rules, from this package's directory.
const (
	dashboardPath = "../../deployments/grafana/gpufrac.json"
	rulesPath     = "../../deployments/prometheus/gpufrac-rules.yaml"
)

// panelsWithoutData are the dashboard queries (panel title, then refId)
// this scenario cannot give data, and why; every other query must return
// some. The list is exact: a query listed here that does return data fails
// the test too, so the list cannot go stale.
var panelsWithoutData = map[string]string{
	"Fragmentation by pool/A":   "gpufrac-controller does not run on the e2e tier; its fragmentation gauges are evaluated over the controller's registry in hack/dashexpr",
	"Fragmentation by pool/B":   "gpufrac-controller does not run on the e2e tier (as A)",
	"Fragmentation by pool/C":   "gpufrac-controller does not run on the e2e tier (as A)",
	"GPUs with ignored sizes/A": "gpufrac-controller does not run on the e2e tier (as Fragmentation by pool)",
	"Unhealthy GPUs and their claims/A": "no GPU of the real node is unhealthy in this scenario " +
		"(hack/dashexpr evaluates the panel over test/promscenario's unhealthy-gpu-with-claims)",
	"Unhealthy GPUs and their claims/B": "no GPU of the real node is unhealthy (as A)",
}

// TestDashboardAndAlertsOnALivePrometheus (issue 38, item 4, root tier): a
// real Prometheus (Debian's 2.42, hack/prombin) scrapes the plugin on the
// real node while, on a 141Gi GPU, pod a (request 40Gi, limit 130Gi,
// restartPolicy OnFailure) borrows 90Gi from the GPU's MPS daemon (the
// double) and pods b1..b3 (60Gi each, within their request) each need
// memory a holds: the daemon evicts a's client three times, the kubelet
// restarts a's container each time, and its claim stays prepared. Then a's
// container uses 128Gi (the simulated NVML's per-cgroup use), above its
// request on a GPU over 90% used and within 2% of its limit. With the
// shipped rule file loaded (evaluated every second, each `for` shortened
// to seconds: the expressions are the shipped ones),
// GPUFracRepeatedEvictions, GPUFracBorrowerNearEviction and
// GPUFracContainerAtHardLimit fire for a's claim; and every query of the
// shipped dashboard returns data through the HTTP API, but those
// panelsWithoutData lists with its reason.
func TestDashboardAndAlertsOnALivePrometheus(t *testing.T) {
	e := newEnv(t)
	prom := e.startPrometheus()
	start := time.Now()
	class := e.classFor(7)
	e.createTemplate("borrower", class, "40Gi", "memoryLimit: 130Gi\ncomputeMode: TimeSlicing\n")
	e.createTemplate("strict", class, "60Gi", "computeMode: TimeSlicing\n")

	// The daemon's log is the GPU's, kept across tests: a's allocations
	// are counted from here, its evictions by its pod's cgroup.
	daemon := newDaemonLog(e.gpuUUIDAt(7))
	allocs := daemon.count("92160MiB ok")
	a := fakeCUDAPod("a", "borrower", "-name", "pod-a", "alloc", "92160", "hold", "0")
	a.Spec.RestartPolicy = v1.RestartPolicyOnFailure
	created := e.createPod(a)
	g := e.gpuOf(e.waitRunning("a"))
	evicted := func() int {
		return daemon.count("memacct: evicted client", string(created.UID), strings.ReplaceAll(string(created.UID), "-", "_"))
	}
	const evictions = 3
	for i := 1; i <= evictions; i++ {
		e.poll(fmt.Sprintf("pod a's 90Gi allocation number %d in the daemon's log %s", i, daemon.path), func() (bool, error) {
			return daemon.count("92160MiB ok") >= allocs+i, nil
		})
		b := fmt.Sprintf("b%d", i)
		e.createPod(fakeCUDAPod(b, "strict", "-name", "pod-"+b, "alloc", "61440"))
		e.poll(fmt.Sprintf("eviction %d of pod a's client, and pod %s to succeed", i, b), func() (bool, error) {
			p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, b, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return evicted() >= i && p.Status.Phase == v1.PodSucceeded, nil
		})
	}
	claimUID := string(g.Claim.UID)
	e.pollVector(prom, fmt.Sprintf(`gpufrac_fraction_incidents_total{kind=%q, claim_uid=%q} == %d`, "MPSClientEvicted", claimUID, evictions))

	// a's container, restarted once more, borrows to 128Gi of its 130Gi.
	e.poll("pod a's fourth allocation", func() (bool, error) { return daemon.count("92160MiB ok") > allocs+evictions, nil })
	running := e.waitRunning("a")
	hook := e.checkHook(running, g, 40*gib, 130*gib)
	usage := filepath.Join(node.PluginDataDir, gpusim.UsageFile)
	t.Cleanup(func() { _ = os.Remove(usage) })
	raw, _ := json.Marshal(map[string]map[string]int64{g.UUID: {hook.Cgroup: 128 * gib}})
	if err := os.WriteFile(usage, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	e.pollVector(prom, fmt.Sprintf(`gpufrac_container_gpu_memory_used_bytes{claim_uid=%q} == %d`, claimUID, 128*gib))

	for _, alert := range []string{"GPUFracRepeatedEvictions", "GPUFracBorrowerNearEviction", "GPUFracContainerAtHardLimit"} {
		e.waitFiring(prom, alert, g.Claim.Name)
	}
	e.checkPanels(prom, start)
}

// startPrometheus fetches Prometheus 2.42 and starts it scraping the real
// node's plugin every second with the shipped rules, evaluated every
// second.
func (e *env) startPrometheus() *prombin.Server {
	e.t.Helper()
	bins, err := prombin.Fetch(e.ctx)
	mustrun.Need(e.t, err == nil, fmt.Sprintf("Prometheus 2.42 (hack/prombin): %v", err))
	rules := shortenFor(e.t, rulesPath, 2*time.Second)
	prom, err := bins.StartServer(e.ctx, e.t, prombin.ServerOptions{
		Targets:        []prombin.Target{{Job: "gpufrac-kubelet-plugin", URL: "http://" + metricsAddr + "/metrics"}},
		ScrapeInterval: time.Second, EvaluationInterval: time.Second, RuleFiles: []string{rules},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := prom.WaitScraped(e.ctx, 1, waitTimeout); err != nil {
		e.t.Fatal(err)
	}
	return prom
}

// shortenFor copies a rule file with every rule's `for` set to d, so an
// alert that would wait minutes in a cluster fires within a test; the
// expressions, labels and annotations are the file's.
func shortenFor(t *testing.T, path string, d time.Duration) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the shipped rule file: %v", err)
	}
	var file struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if _, ok := r["for"]; ok {
				r["for"] = d.String()
				n++
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no rule has a for to shorten; the file changed shape", path)
	}
	out, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "gpufrac-rules.yaml")
	if err := os.WriteFile(short, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return short
}

// daemonLog is the control log of a GPU's MPS daemon (the double).
type daemonLog struct{ path string }

func newDaemonLog(uuid string) daemonLog {
	return daemonLog{filepath.Join(mpslayout.For(filepath.Join(node.PluginDataDir, "mps"), uuid).LogDir, "control.log")}
}

// count is the number of the log's lines with s and, if any are given,
// one of also.
func (d daemonLog) count(s string, also ...string) int {
	raw, _ := os.ReadFile(d.path)
	n := 0
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, s) && (len(also) == 0 || slices.ContainsFunc(also, func(a string) bool { return strings.Contains(l, a) })) {
			n++
		}
	}
	return n
}

// gpuUUIDAt is the uuid of the real node's GPU of this index.
func (e *env) gpuUUIDAt(index int64) string {
	e.t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if s.Spec.Driver == driver && d.Attributes["index"].IntValue != nil && *d.Attributes["index"].IntValue == index && d.Attributes["uuid"].StringValue != nil {
				return *d.Attributes["uuid"].StringValue
			}
		}
	}
	e.t.Fatalf("node %s has no GPU of index %d", node.Name, index)
	return ""
}

// pollVector waits until expr has a sample on the server.
func (e *env) pollVector(prom *prombin.Server, expr string) {
	e.t.Helper()
	e.poll("Prometheus: "+expr, func() (bool, error) {
		v, err := prom.QueryVector(e.ctx, expr)
		if err != nil {
			return false, err
		}
		return len(v) > 0, nil
	})
}

// waitFiring waits until the alert fires for the claim, and logs it.
func (e *env) waitFiring(prom *prombin.Server, alert, claim string) {
	e.t.Helper()
	var seen []string
	e.poll(alert+" firing for claim "+e.ns+"/"+claim, func() (bool, error) {
		alerts, err := prom.Alerts(e.ctx)
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, a := range alerts {
			seen = append(seen, a.Labels["alertname"]+" "+a.State+" "+a.Labels["namespace"]+"/"+a.Labels["claim"])
			if a.Labels["alertname"] == alert && a.State == "firing" && a.Labels["namespace"] == e.ns && a.Labels["claim"] == claim {
				e.t.Logf("%s firing: %s", alert, a.Annotations["summary"])
				return true, nil
			}
		}
		return false, nil
	})
	if e.t.Failed() {
		e.t.Logf("active alerts: %q", seen)
	}
}

// checkPanels runs every query of the shipped dashboard over the
// scenario's time range, as Grafana does (query_range; the template
// variables at All), and wants data from each but panelsWithoutData.
func (e *env) checkPanels(prom *prombin.Server, start time.Time) {
	e.t.Helper()
	end := time.Now()
	vars := map[string]string{"node": ".*", "gpu": ".*", "namespace": ".*",
		"__rate_interval": "1m", "__range": fmt.Sprintf("%ds", int(end.Sub(start).Seconds())+1)}
	queries, err := dashexpr.Queries(dashboardPath, vars)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(queries) == 0 {
		e.t.Fatalf("%s: no queries", dashboardPath)
	}
	var with, without []string
	for _, q := range queries {
		key := q.Panel + "/" + q.RefID
		m, err := prom.QueryRange(context.WithoutCancel(e.ctx), q.Expr, start, end, 2*time.Second)
		if err != nil {
			e.t.Errorf("panel %s: %s: %v", key, q.Expr, err)
			continue
		}
		samples := 0
		for _, s := range m {
			samples += len(s.Values)
		}
		why, expected := panelsWithoutData[key]
		switch {
		case samples == 0 && !expected:
			e.t.Errorf("panel %s has no data: %s", key, q.Expr)
		case samples > 0 && expected:
			e.t.Errorf("panel %s has data (%d series), but panelsWithoutData says it cannot (%s); update the list", key, len(m), why)
		case samples == 0:
			without = append(without, key+" ("+why+")")
		default:
			with = append(with, fmt.Sprintf("%s: %d series", key, len(m)))
		}
	}
	for key := range panelsWithoutData {
		if !slices.ContainsFunc(queries, func(q dashexpr.Query) bool { return q.Panel+"/"+q.RefID == key }) {
			e.t.Errorf("panelsWithoutData names %s, which the dashboard does not have", key)
		}
	}
	e.t.Logf("%d queries with data:\n  %s", len(with), strings.Join(with, "\n  "))
	e.t.Logf("%d without, as expected:\n  %s", len(without), strings.Join(without, "\n  "))
}
