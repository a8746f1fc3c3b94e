// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package incident_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestNVMLSource: each recorded container of a prepared claim is sampled
// from NVML's per-cgroup limits and use, with the limits NVML holds;
// containers of claims no longer prepared and cgroups NVML does not know
// are skipped; the samples drive the detector to a borrowing incident.
func TestNVMLSource(t *testing.T) {
	dir := t.TempDir()
	write := func(claimUID, id string, r record.Record) {
		raw, _ := json.Marshal(r)
		path := record.Path(dir, claimUID, id)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, raw, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write("uid-llm", "c1", record.Record{ClaimUID: "uid-llm", Namespace: "team", Pod: "llm-0", Container: "server", Cgroup: "/cg/llm", GPUs: []string{"GPU-0"}})
	write("uid-llm", "c2", record.Record{ClaimUID: "uid-llm", Namespace: "team", Pod: "llm-0", Container: "sidecar", Cgroup: "/cg/unknown", GPUs: []string{"GPU-0"}})
	write("uid-gone", "c3", record.Record{ClaimUID: "uid-gone", Namespace: "team", Pod: "old", Container: "x", Cgroup: "/cg/old", GPUs: []string{"GPU-0"}})

	used := uint64(30 << 30)
	dev := &mock.Device{GetMemoryLimits_v1Func: func(cgroup string) (nvml.MemoryLimits_v1, nvml.Return) {
		switch cgroup {
		case "/cg/llm":
			return nvml.MemoryLimits_v1{NameSpace: cgroup, SoftLimit: 40 << 30, HardLimit: 60 << 30, CurrentUsed: used}, nvml.SUCCESS
		case "/cg/old":
			return nvml.MemoryLimits_v1{NameSpace: cgroup, SoftLimit: 1, HardLimit: 1, CurrentUsed: 2}, nvml.SUCCESS
		}
		return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
	}}
	lib := &mock.Interface{DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
		if uuid == "GPU-0" {
			return dev, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}}
	prepared := []plan.Claim{{UID: "uid-llm", Namespace: "team", Name: "llm", Devices: []plan.Device{{Pool: "n1", Device: "gpu-0",
		GPU: domain.GPU{UUID: "GPU-0"}, SoftLimitBytes: 40 << 30, HardLimitBytes: 60 << 30}}}}
	src := incident.NVMLSource{NVML: lib, RecordDir: dir, Prepared: func() []plan.Claim { return prepared }}

	samples := src.Samples(time.Unix(1, 0))
	if len(samples) != 1 {
		t.Fatalf("samples %+v, want one (the sidecar's cgroup is unknown to NVML, the old claim is not prepared)", samples)
	}
	s := samples[0]
	if s.Container.Container != "server" || s.Share.ClaimName != "llm" || s.Share.SoftBytes != 40<<30 || s.Share.HardBytes != 60<<30 || s.UsedBytes != 30<<30 {
		t.Errorf("sample %+v", s)
	}
	d := incident.NewDetector()
	if got := d.Observe("n1", samples); len(got) != 0 {
		t.Errorf("within the request: %+v", got)
	}
	used = 45 << 30
	if got := d.Observe("n1", src.Samples(time.Unix(2, 0))); len(got) != 1 || got[0].Kind != incident.Borrowing || !got[0].Active {
		t.Errorf("above the request: %+v, want borrowing", got)
	}
}

// TestRecordsContainerOf: a client PID whose cgroup is a recorded
// container's (or below it) is that container, for the GPUs it records.
func TestRecordsContainerOf(t *testing.T) {
	dir, proc := t.TempDir(), t.TempDir()
	raw, _ := json.Marshal(record.Record{ClaimUID: "u", Namespace: "team", Pod: "llm-0", Container: "server",
		Cgroup: "/sys/fs/cgroup/kubepods/pod1/c1", GPUs: []string{"GPU-0"}})
	path := record.Path(dir, "u", "c1")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o640); err != nil {
		t.Fatal(err)
	}
	for pid, cg := range map[string]string{"7": "0::/kubepods/pod1/c1/sub\n", "8": "0::/kubepods/pod2/c9\n"} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(cg), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	of := incident.RecordsContainerOf(dir, proc, "/sys/fs/cgroup")
	if c, ok := of("GPU-0", 7); !ok || c.Pod != "llm-0" || c.Container != "server" {
		t.Errorf("pid 7: %+v %v, want llm-0/server", c, ok)
	}
	if _, ok := of("GPU-1", 7); ok {
		t.Error("pid 7 matched on a GPU its container does not record")
	}
	if _, ok := of("GPU-0", 8); ok {
		t.Error("pid 8 of another pod matched")
	}
	if _, ok := of("GPU-0", 9); ok {
		t.Error("a PID without /proc entry matched")
	}
}
