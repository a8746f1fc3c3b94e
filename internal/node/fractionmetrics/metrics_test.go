// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fractionmetrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/node/fractionmetrics"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func writeRecord(t *testing.T, dir string, r record.Record, id string) string {
	t.Helper()
	path := record.Path(dir, r.ClaimUID, id)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(r)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCollect(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.NewWithGPUs(dgxh200.New().Devices[0].(*server.Device).Config)
	gpu := srv.Devices[0].(*server.Device)
	cgroup := t.TempDir() // a live container's cgroup directory
	gpu.GetMemoryLimits_v1Func = func(ns string) (nvml.MemoryLimits_v1, nvml.Return) {
		if ns != cgroup {
			return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
		}
		return nvml.MemoryLimits_v1{CurrentUsed: 12 << 30}, nvml.SUCCESS
	}
	gpu.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	gpu.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem})
	if err != nil {
		t.Fatal(err)
	}
	prepared := []plan.Claim{{UID: "uid-1", Namespace: "team", Name: "llm", Devices: []plan.Device{{
		Device: "gpu-0", ShareID: ptr.To(types.UID("s1")), GPU: inv.GPUs[0],
		SoftLimitBytes: 40 << 30, HardLimitBytes: 60 << 30, ComputeMode: v1alpha1.TimeSlicing, Enforcement: domain.EnforcementDMem,
	}}}}
	records := t.TempDir()
	writeRecord(t, records, record.Record{ClaimUID: "uid-1", Namespace: "team", Pod: "llm-0", Container: "main", Cgroup: cgroup, GPUs: []string{gpu.UUID}}, "c1")
	gone := writeRecord(t, records, record.Record{ClaimUID: "uid-1", Namespace: "team", Pod: "llm-old", Container: "main", Cgroup: filepath.Join(cgroup, "gone"), GPUs: []string{gpu.UUID}}, "c0")
	writeRecord(t, records, record.Record{ClaimUID: "uid-unprepared", Cgroup: cgroup, GPUs: []string{gpu.UUID}}, "c9")

	c := fractionmetrics.New(fractionmetrics.Config{
		NodeName: "node-a", Inventory: inv, Prepared: func() []plan.Claim { return prepared }, RecordDir: records, NVML: srv,
		MPSDaemons:  func() map[string]int { return map[string]int{"GPU-mps": 3} },
		Quarantined: func() int { return 1 },
	})
	c.ObservePrepare(3*time.Millisecond, "")
	c.ObservePrepare(time.Millisecond, "invalid_claim")
	u := gpu.UUID
	want := `
# HELP gpufrac_checkpoint_quarantined_entries Checkpoint entries this plugin version does not understand (written by a later one): kept, and nothing they may own is removed (docs/operations.md).
# TYPE gpufrac_checkpoint_quarantined_entries gauge
gpufrac_checkpoint_quarantined_entries{node="node-a"} 1
# HELP gpufrac_container_gpu_memory_used_bytes GPU memory a container uses now: NVML's per-cgroup accounting where the node enforces dmem, else the sum over its processes.
# TYPE gpufrac_container_gpu_memory_used_bytes gauge
gpufrac_container_gpu_memory_used_bytes{claim_uid="uid-1",container="main",gpu_uuid="` + u + `",namespace="team",node="node-a",pod="llm-0"} 1.2884901888e+10
# HELP gpufrac_fraction_memory_limit_bytes Hard GPU memory limit of a prepared share.
# TYPE gpufrac_fraction_memory_limit_bytes gauge
gpufrac_fraction_memory_limit_bytes{claim="llm",claim_uid="uid-1",compute_mode="TimeSlicing",device="gpu-0",enforcement="dmem",gpu_uuid="` + u + `",namespace="team",node="node-a",share="s1"} 6.442450944e+10
# HELP gpufrac_fraction_memory_request_bytes Guaranteed GPU memory of a prepared share (its soft limit).
# TYPE gpufrac_fraction_memory_request_bytes gauge
gpufrac_fraction_memory_request_bytes{claim="llm",claim_uid="uid-1",compute_mode="TimeSlicing",device="gpu-0",enforcement="dmem",gpu_uuid="` + u + `",namespace="team",node="node-a",share="s1"} 4.294967296e+10
# HELP gpufrac_gpu_memory_overcommit_ratio Sum of hard limits over GPU memory; above 1 the limits are burstable, never the requests.
# TYPE gpufrac_gpu_memory_overcommit_ratio gauge
gpufrac_gpu_memory_overcommit_ratio{device="gpu-0",gpu_uuid="` + u + `",node="node-a"} 0.425531914893617
# HELP gpufrac_mps_daemon_claims Claims counted as users of a GPU's MPS daemon (SMSharing claims; on MPS v3 nodes with per-cgroup limits every claim, TimeSlicing included, is an MPS client); the daemon stops when this reaches 0.
# TYPE gpufrac_mps_daemon_claims gauge
gpufrac_mps_daemon_claims{gpu_uuid="GPU-mps",node="node-a"} 3
# HELP gpufrac_mps_daemons MPS control daemons the plugin runs.
# TYPE gpufrac_mps_daemons gauge
gpufrac_mps_daemons{node="node-a"} 1
# HELP gpufrac_prepare_errors_total Failed Prepare calls by reason.
# TYPE gpufrac_prepare_errors_total counter
gpufrac_prepare_errors_total{reason="internal"} 0
gpufrac_prepare_errors_total{reason="invalid_claim"} 1
gpufrac_prepare_errors_total{reason="mode_conflict"} 0
gpufrac_prepare_errors_total{reason="no_mps"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpufrac_checkpoint_quarantined_entries",
		"gpufrac_container_gpu_memory_used_bytes", "gpufrac_fraction_memory_limit_bytes", "gpufrac_fraction_memory_request_bytes",
		"gpufrac_gpu_memory_overcommit_ratio", "gpufrac_mps_daemon_claims", "gpufrac_mps_daemons", "gpufrac_prepare_errors_total"); err != nil {
		t.Error(err)
	}
	// A scrape changes nothing on disk; pruning does.
	for _, path := range []string{gone, filepath.Join(records, "uid-unprepared")} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("a scrape removed %s: %v", path, err)
		}
	}
	if n, err := c.PruneRecords(); err != nil || n != 2 {
		t.Errorf("PruneRecords removed %d (%v), want the vanished container's record and the unprepared claim's directory", n, err)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Error("the record of a vanished container was kept: its series would go stale")
	}
	if _, err := os.Stat(filepath.Join(records, "uid-unprepared")); !os.IsNotExist(err) {
		t.Error("records of an unprepared claim were kept")
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpufrac_container_gpu_memory_used_bytes"); err != nil {
		t.Errorf("after pruning: %v", err)
	}
	if n := testutil.CollectAndCount(c, "gpufrac_prepare_duration_seconds"); n != 2 {
		t.Errorf("%d prepare histograms, want success and error", n)
	}
}
