// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package alerts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/hack/prombin"
)

// One node's series, written by hand in the plugin's label sets, where
// every alert's condition holds: what on-call reads is checked here word
// for word (labels and rendered annotations); the scenarios of
// scenario_test.go check the same alerts over the code's own series.
const (
	job = `job="gpufrac-kubelet-plugin",instance="10.0.0.1:8080",node="n1"`
	gpu = `gpu_uuid="GPU-aaa"`
	// Claim A borrows (39.5Gi used over a 20Gi request, 98.75% of its 40Gi
	// limit); claim B stays within its request; 74.5Gi of the GPU's 80Gi
	// are used.
	claimA = `namespace="team-a",claim="train",claim_uid="uid-a",` + gpu + `,device="gpu-0",share="s1",compute_mode="SMSharing",enforcement="dmem"`
	claimB = `namespace="team-b",claim="infer",claim_uid="uid-b",` + gpu + `,device="gpu-0",share="s2",compute_mode="SMSharing",enforcement="dmem"`
	contA  = `namespace="team-a",pod="train-0",container="main",claim_uid="uid-a",` + gpu
	contB  = `namespace="team-b",pod="infer-0",container="main",claim_uid="uid-b",` + gpu
	gi     = 1 << 30
)

func handSeries() []prombin.Series {
	flat := func(v float64) string { return fmt.Sprintf("%.0f+0x24", v) }
	s := func(name, labels, values string) prombin.Series {
		return prombin.Series{Series: name + "{" + job + "," + labels + "}", Values: values}
	}
	return []prombin.Series{
		s("gpufrac_gpu_memory_total_bytes", gpu+`,device="gpu-0"`, flat(80*gi)),
		s("gpufrac_gpu_memory_total_bytes", `gpu_uuid="GPU-bbb",device="gpu-1"`, flat(80*gi)),
		s("gpufrac_fraction_memory_request_bytes", claimA, flat(20*gi)),
		s("gpufrac_fraction_memory_limit_bytes", claimA, flat(40*gi)),
		s("gpufrac_fraction_memory_request_bytes", claimB, flat(40*gi)),
		s("gpufrac_fraction_memory_limit_bytes", claimB, flat(40*gi)),
		s("gpufrac_container_gpu_memory_used_bytes", contA, flat(39.5*gi)),
		s("gpufrac_container_gpu_memory_used_bytes", contB, flat(35*gi)),
		s("gpufrac_fraction_incidents_total", `namespace="team-a",claim="train",claim_uid="uid-a",`+gpu+`,kind="MPSClientEvicted"`, "0 1 2 3+0x21"),
		s("gpufrac_fraction_incidents_total", `namespace="team-b",claim="infer",claim_uid="uid-b",`+gpu+`,kind="MPSClientEvicted"`, "0+0x24"),
		s("gpufrac_mps_daemon_ready", `gpu_uuid="GPU-bbb"`, "0+0x24"),
		s("gpufrac_mps_daemon_ready", gpu, "1+0x24"),
		s("gpufrac_gpu_unhealthy", gpu+`,device="gpu-0",reason="XID 79"`, "1+0x24"),
		s("gpufrac_gpu_unhealthy", `gpu_uuid="GPU-bbb",device="gpu-1",reason=""`, "0+0x24"),
		// A reason's first failure at 10m: the series appears at 1.
		{Series: `gpufrac_prepare_errors_total{job="gpufrac-kubelet-plugin",instance="10.0.0.1:8080",reason="no_mps"}`, Values: "_x10 1+0x14"},
		s("gpufrac_claims_prepared", "", flat(2)),
		s("gpufrac_checkpoint_quarantined_entries", "", flat(1)),
	}
}

func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func runbook(alert string) string {
	return "https://github.com/gpufrac/gpufrac/blob/main/docs/operations.md#" + strings.ToLower(alert)
}

// handExpectations are the alerts firing at 16m over handSeries, exactly.
func handExpectations() map[string]prombin.ExpAlert {
	node := []string{"node", "n1"}
	return map[string]prombin.ExpAlert{
		"GPUFracBorrowerNearEviction": {
			ExpLabels: labels(append(node, "severity", "warning", "namespace", "team-a", "claim", "train", "claim_uid", "uid-a", "gpu_uuid", "GPU-aaa", "device", "gpu-0")...),
			ExpAnnotations: labels(
				"summary", "Claim team-a/train borrows GPU memory on a nearly full GPU (n1/gpu-0) and may be evicted",
				"description", "Claim team-a/train uses 39.5GiB on GPU gpu-0 (GPU-aaa) of node n1, more than its guaranteed request, and the GPU is over 90% used. When another claim that is within its request needs memory, the borrower's CUDA client is ended (MPSClientEvicted) and its pod's GPU calls fail.",
				"runbook_url", runbook("GPUFracBorrowerNearEviction")),
		},
		"GPUFracRepeatedEvictions": {
			ExpLabels: labels(append(node, "severity", "warning", "namespace", "team-a", "claim", "train", "claim_uid", "uid-a", "gpu_uuid", "GPU-aaa")...),
			ExpAnnotations: labels(
				"summary", "Claim team-a/train was evicted from its GPU 3 times in the last hour",
				"description", "Clients of claim team-a/train on GPU GPU-aaa of node n1 were ended 3 times in the last hour because they used more than the claim's guaranteed request while another claim on that GPU needed its guaranteed memory (MPSClientEvicted Events name that claim). The workload needs a larger request, or a GPU with fewer guarantees.",
				"runbook_url", runbook("GPUFracRepeatedEvictions")),
		},
		"GPUFracContainerAtHardLimit": {
			ExpLabels: labels(append(node, "severity", "warning", "job", "gpufrac-kubelet-plugin", "instance", "10.0.0.1:8080",
				"namespace", "team-a", "pod", "train-0", "container", "main", "claim", "train", "claim_uid", "uid-a", "gpu_uuid", "GPU-aaa")...),
			ExpAnnotations: labels(
				"summary", "Container team-a/train-0/main has been at its GPU memory limit for 15 minutes",
				"description", "Container main of pod team-a/train-0 uses 98.75% of claim train's hard limit on GPU GPU-aaa of node n1: every further GPU allocation it makes fails with out of memory.",
				"runbook_url", runbook("GPUFracContainerAtHardLimit")),
		},
		"GPUFracMPSDaemonNotReady": {
			ExpLabels: labels(append(node, "severity", "critical", "gpu_uuid", "GPU-bbb")...),
			ExpAnnotations: labels(
				"summary", "The MPS daemon of GPU GPU-bbb on node n1 has not been ready for 5 minutes",
				"description", "Claims on GPU GPU-bbb of node n1 need its MPS control daemon, which is missing or failing its health check: their new containers cannot start and running ones may have lost the GPU.",
				"runbook_url", runbook("GPUFracMPSDaemonNotReady")),
		},
		"GPUFracUnhealthyGPUWithClaims": {
			ExpLabels: labels(append(node, "severity", "critical", "gpu_uuid", "GPU-aaa", "device", "gpu-0", "reason", "XID 79")...),
			ExpAnnotations: labels(
				"summary", "Unhealthy GPU n1/gpu-0 (XID 79) still holds 2 claim(s)",
				"description", "GPU gpu-0 (GPU-aaa) of node n1 is unhealthy (XID 79) and tainted, so no new claim lands on it, but 2 prepared claim(s) still use it: their pods run on a GPU that reported a fatal error.",
				"runbook_url", runbook("GPUFracUnhealthyGPUWithClaims")),
		},
		"GPUFracPrepareErrors": {
			ExpLabels: labels(append(node, "severity", "warning", "job", "gpufrac-kubelet-plugin", "instance", "10.0.0.1:8080", "reason", "no_mps")...),
			ExpAnnotations: labels(
				"summary", "The gpufrac plugin on node n1 failed to prepare claims (no_mps)",
				"description", "The kubelet plugin on node n1 failed 1 Prepare call(s) with reason no_mps in the last 15 minutes: the pods of those claims stay in ContainerCreating while the kubelet retries. The PrepareFailed Events on the claims say why.",
				"runbook_url", runbook("GPUFracPrepareErrors")),
		},
		"GPUFracCheckpointQuarantined": {
			ExpLabels: labels(append(node, "severity", "warning")...),
			ExpAnnotations: labels(
				"summary", "The gpufrac plugin on node n1 keeps 1 checkpoint entries it does not understand",
				"description", "The kubelet plugin on node n1 quarantined 1 entries of its checkpoint (written by a later release, or out of bounds): it keeps their CDI specs and removes no MPS daemon on the node until the kubelet unprepares those claims.",
				"runbook_url", runbook("GPUFracCheckpointQuarantined")),
		},
	}
}

// TestAlertsSayWhatAndWhere: over handSeries every alert fires once at 16m
// with exactly these labels and this text, and none fires before its for:
// (at 1m; the Prepare error, which starts at 10m, at 14m).
func TestAlertsSayWhatAndWhere(t *testing.T) {
	b := fetch(t)
	want := handExpectations()
	var tests []prombin.AlertRuleTest
	for _, name := range alertNames {
		tests = append(tests, prombin.AlertRuleTest{
			EvalTime: prombin.Duration(16 * time.Minute), Alertname: name, ExpAlerts: []prombin.ExpAlert{want[name]},
		})
		early := time.Minute
		if name == "GPUFracPrepareErrors" {
			early = 14 * time.Minute
		}
		tests = append(tests, prombin.AlertRuleTest{EvalTime: prombin.Duration(early), Alertname: name})
	}
	path, err := prombin.WriteRuleTest(t.TempDir(), "hand.yaml", prombin.RuleTestFile{
		RuleFiles:          []string{rulesFile},
		EvaluationInterval: prombin.Duration(time.Minute),
		Tests:              []prombin.RuleTest{{Interval: prombin.Duration(time.Minute), InputSeries: handSeries(), AlertRuleTests: tests}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := b.TestRules(context.Background(), path); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
