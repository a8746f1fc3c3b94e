// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fractionmetrics_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/fractionmetrics"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// joinFamilies are the series issue 38 added for dashboards and alerts.
var joinFamilies = []string{"gpufrac_gpu_unhealthy", "gpufrac_mps_daemon_ready", "gpufrac_fraction_incidents_total"}

const joinHelp = `# HELP gpufrac_fraction_incidents_total GPU memory incidents started per prepared share, by kind (those of gpufrac_incidents_total); the series go when the claim is unprepared.
# TYPE gpufrac_fraction_incidents_total counter
# HELP gpufrac_gpu_unhealthy 1 while the plugin holds the GPU unhealthy and taints its devices in the ResourceSlice (reason: the taint's, e.g. "XID 79"), 0 with an empty reason while it is healthy.
# TYPE gpufrac_gpu_unhealthy gauge
# HELP gpufrac_mps_daemon_ready 1 when the MPS daemon of a GPU whose claims need one passed its health check (its Pod's readiness probe) when the plugin last saw it, 0 when it is missing, stopping or failing the check.
# TYPE gpufrac_mps_daemon_ready gauge
`

// incidentSeries is the five kinds' series of one share, with the counts
// given (zero for the others).
func incidentSeries(ns, claim, uid, gpu string, counts map[incident.Kind]int) string {
	var b strings.Builder
	for _, k := range incident.Kinds {
		b.WriteString(`gpufrac_fraction_incidents_total{claim="` + claim + `",claim_uid="` + uid + `",gpu_uuid="` + gpu + `",kind="` + string(k) +
			`",namespace="` + ns + `",node="node-a"} ` + strconv.Itoa(counts[k]) + "\n")
	}
	return b.String()
}

// The join series over a claim's life: health and MPS readiness as the
// plugin last knew them, incident starts counted per share through the real
// Emitter (an end counts nothing), and the claim's series gone at Unprepare
// and its count restarting from zero if the same UID is prepared again.
func TestJoinSeries(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	g0 := domain.GPU{UUID: "GPU-0", Index: 0, MemoryBytes: 80 << 30}
	g1 := domain.GPU{UUID: "GPU-1", Index: 1, MemoryBytes: 80 << 30}
	inv := &domain.Inventory{GPUs: []domain.GPU{g0, g1}}
	share := func(gpu domain.GPU, id string, mode v1alpha1.ComputeMode) plan.Device {
		return plan.Device{Device: domain.DeviceName(gpu.Index), ShareID: ptr.To(types.UID(id)), GPU: gpu,
			SoftLimitBytes: 20 << 30, HardLimitBytes: 40 << 30, ComputeMode: mode, Enforcement: domain.EnforcementDMem}
	}
	llm := plan.Claim{UID: "uid-llm", Namespace: "team", Name: "llm", Devices: []plan.Device{share(g0, "s1", v1alpha1.SMSharing)}}
	// Two shares of one GPU in one claim count as one share there.
	wide := plan.Claim{UID: "uid-wide", Namespace: "ml", Name: "wide", Devices: []plan.Device{share(g1, "s2", v1alpha1.TimeSlicing), share(g1, "s3", v1alpha1.TimeSlicing)}}
	admin := plan.Claim{UID: "uid-admin", Namespace: "ops", Name: "probe", Devices: []plan.Device{{Device: "gpu-0", GPU: g0, AdminAccess: true}}}

	var prepared []plan.Claim
	unhealthy := map[string]string{}
	ready := map[string]bool{}
	c := fractionmetrics.New(fractionmetrics.Config{
		NodeName: "node-a", Inventory: inv, Prepared: func() []plan.Claim { return prepared },
		Unhealthy: func() map[string]string { return unhealthy }, MPSReady: func() map[string]bool { return ready },
	})
	e := &incident.Emitter{Shares: c}
	emit := func(cl plan.Claim, gpu string, kind incident.Kind, active bool) {
		e.Emit(ctx, incident.Incident{Kind: kind, Active: active, Node: "node-a", Time: time.Unix(1, 0),
			Share: incident.Share{ClaimNamespace: cl.Namespace, ClaimName: cl.Name, ClaimUID: cl.UID, GPUUUID: gpu}})
	}
	healthy := `gpufrac_gpu_unhealthy{device="gpu-0",gpu_uuid="GPU-0",node="node-a",reason=""} 0
gpufrac_gpu_unhealthy{device="gpu-1",gpu_uuid="GPU-1",node="node-a",reason=""} 0
`
	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"nothing prepared: one health series per GPU, nothing else", func() {}, healthy},
		{"claims prepared, daemon ready, no incident yet: every kind at zero", func() {
			prepared = []plan.Claim{llm, wide, admin}
			ready["GPU-0"] = true
		}, healthy + `gpufrac_mps_daemon_ready{gpu_uuid="GPU-0",node="node-a"} 1
` + incidentSeries("team", "llm", "uid-llm", "GPU-0", nil) + incidentSeries("ml", "wide", "uid-wide", "GPU-1", nil)},
		{"evicted twice, borrowing once (its end counts nothing), daemon failing, GPU-1 XID 79", func() {
			emit(llm, "GPU-0", incident.MPSEvicted, true)
			emit(llm, "GPU-0", incident.MPSEvicted, true)
			emit(wide, "GPU-1", incident.Borrowing, true)
			emit(wide, "GPU-1", incident.Borrowing, false)
			ready["GPU-0"] = false
			unhealthy["GPU-1"] = "XID 79"
		}, `gpufrac_gpu_unhealthy{device="gpu-0",gpu_uuid="GPU-0",node="node-a",reason=""} 0
gpufrac_gpu_unhealthy{device="gpu-1",gpu_uuid="GPU-1",node="node-a",reason="XID 79"} 1
gpufrac_mps_daemon_ready{gpu_uuid="GPU-0",node="node-a"} 0
` + incidentSeries("team", "llm", "uid-llm", "GPU-0", map[incident.Kind]int{incident.MPSEvicted: 2}) +
			incidentSeries("ml", "wide", "uid-wide", "GPU-1", map[incident.Kind]int{incident.Borrowing: 1})},
		{"llm unprepared: its series go, a failed Unprepare of wide keeps wide's", func() {
			prepared = []plan.Claim{wide, admin}
			delete(ready, "GPU-0")
			delete(unhealthy, "GPU-1")
			c.ObserveUnprepare(time.Millisecond, llm.UID, nil)
			c.ObserveUnprepare(time.Millisecond, wide.UID, errors.New("busy"))
		}, healthy + incidentSeries("ml", "wide", "uid-wide", "GPU-1", map[incident.Kind]int{incident.Borrowing: 1})},
		{"llm prepared again under its UID: counting restarts at zero", func() {
			prepared = []plan.Claim{llm, wide}
		}, healthy + incidentSeries("team", "llm", "uid-llm", "GPU-0", nil) +
			incidentSeries("ml", "wide", "uid-wide", "GPU-1", map[incident.Kind]int{incident.Borrowing: 1})},
		{"an MPS incident resolved during wide's Unprepare lands after it: never shown, pruned", func() {
			prepared = []plan.Claim{llm}
			emit(wide, "GPU-1", incident.MPSTerminated, true)
			if _, err := c.PruneRecords(); err != nil {
				t.Fatal(err)
			}
			prepared = []plan.Claim{llm, wide}
		}, healthy + incidentSeries("team", "llm", "uid-llm", "GPU-0", nil) + incidentSeries("ml", "wide", "uid-wide", "GPU-1", nil)},
	}
	for _, s := range steps {
		s.change()
		if err := testutil.CollectAndCompare(c, strings.NewReader(joinHelp+s.want), joinFamilies...); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
}

// The share metrics carry claim_uid, the container metrics' label, so that
// PromQL can join them on(node, gpu_uuid, claim_uid).
func TestShareMetricsCarryClaimUID(t *testing.T) {
	g := domain.GPU{UUID: "GPU-0", Index: 0, MemoryBytes: 80 << 30}
	prepared := []plan.Claim{{UID: "uid-a", Namespace: "team", Name: "a", Devices: []plan.Device{{Device: "gpu-0", ShareID: ptr.To(types.UID("s1")), GPU: g,
		SoftLimitBytes: 10 << 30, HardLimitBytes: 20 << 30, ComputeMode: v1alpha1.TimeSlicing, Enforcement: domain.EnforcementDMem}}}}
	c := fractionmetrics.New(fractionmetrics.Config{NodeName: "n", Inventory: &domain.Inventory{GPUs: []domain.GPU{g}}, Prepared: func() []plan.Claim { return prepared }})
	want := `# HELP gpufrac_fraction_memory_request_bytes Guaranteed GPU memory of a prepared share (its soft limit).
# TYPE gpufrac_fraction_memory_request_bytes gauge
gpufrac_fraction_memory_request_bytes{claim="a",claim_uid="uid-a",compute_mode="TimeSlicing",device="gpu-0",enforcement="dmem",gpu_uuid="GPU-0",namespace="team",node="n",share="s1"} 1.073741824e+10
# HELP gpufrac_fraction_memory_limit_bytes Hard GPU memory limit of a prepared share.
# TYPE gpufrac_fraction_memory_limit_bytes gauge
gpufrac_fraction_memory_limit_bytes{claim="a",claim_uid="uid-a",compute_mode="TimeSlicing",device="gpu-0",enforcement="dmem",gpu_uuid="GPU-0",namespace="team",node="n",share="s1"} 2.147483648e+10
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpufrac_fraction_memory_request_bytes", "gpufrac_fraction_memory_limit_bytes"); err != nil {
		t.Error(err)
	}
}
