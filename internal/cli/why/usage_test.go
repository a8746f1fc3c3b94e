// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why_test

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpufrac/gpufrac/internal/cli/why"
)

// TestParseUsage reads what a Prometheus registry writes for the plugin's
// per-container metric (its labels as internal/node/fractionmetrics declares them),
// escapes included, and skips every other metric.
func TestParseUsage(t *testing.T) {
	reg := prometheus.NewRegistry()
	used := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: why.UsageMetric, Help: "x"},
		[]string{"node", "namespace", "pod", "container", "claim_uid", "gpu_uuid"})
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: why.UsageMetric + "_other", Help: "x"}, []string{"pod"})
	reg.MustRegister(used, other)
	used.WithLabelValues("n1", "team", "llm-0", `app"x`, "uid-1", "GPU-1").Set(42 << 30)
	used.WithLabelValues("n1", "team", "llm-1", "app", "uid-2", "GPU-2").Set(1 << 20)
	other.WithLabelValues("llm-0").Set(7)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	got, err := why.ParseUsage(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []why.ContainerUsage{
		{Namespace: "team", Pod: "llm-0", Container: `app"x`, ClaimUID: "uid-1", GPUUUID: "GPU-1", UsedBytes: 42 << 30},
		{Namespace: "team", Pod: "llm-1", Container: "app", ClaimUID: "uid-2", GPUUUID: "GPU-2", UsedBytes: 1 << 20},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parsed %+v, want %+v\nfrom:\n%s", got, want, buf.String())
	}
	if _, err := why.ParseUsage(bytes.NewBufferString(why.UsageMetric + `{pod="x} 1`)); err == nil {
		t.Error("an unterminated label value was accepted")
	}
}
