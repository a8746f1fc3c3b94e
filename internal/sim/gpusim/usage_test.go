// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// TestSimulatedUsage: a recorded cgroup reports the use the usage file
// gives, capped at its hard limit; an unrecorded one stays NOT_FOUND.
func TestSimulatedUsage(t *testing.T) {
	dir := t.TempDir()
	srv, err := gpusim.New("h200x1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	records, usage := filepath.Join(dir, gpusim.RecordFile), filepath.Join(dir, gpusim.UsageFile)
	gpusim.AnswerRecordedLimits(srv, records)
	gpusim.AnswerSimulatedUsage(srv, usage)
	dev, ret := srv.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	uuid, _ := dev.GetUUID()
	// The record the simulated driver keeps for an accepted
	// SetMemoryLimits_v1 (40Gi soft, 60Gi hard on /cg/a).
	rec, _ := json.Marshal(gpusim.LimitRecord{UUID: uuid, Cgroup: "/cg/a", Soft: 40 << 30, Hard: 60 << 30})
	if err := os.WriteFile(records, append(rec, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		if err := os.WriteFile(usage, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		usage string
		want  uint64
	}{
		{`{}`, 0},
		{`{"` + uuid + `": {"/cg/a": 53687091200}}`, 50 << 30},
		{`{"` + uuid + `": {"/cg/a": 107374182400}}`, 60 << 30},
	} {
		write(tc.usage)
		lim, ret := dev.GetMemoryLimits_v1("/cg/a")
		if ret != nvml.SUCCESS || lim.CurrentUsed != tc.want || lim.SoftLimit != 40<<30 || lim.HardLimit != 60<<30 {
			t.Errorf("usage %s: %+v %v, want %d used within 40Gi/60Gi", tc.usage, lim, ret, tc.want)
		}
	}
	if _, ret := dev.GetMemoryLimits_v1("/cg/other"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("an unrecorded cgroup answered %v, want NOT_FOUND", ret)
	}
}
