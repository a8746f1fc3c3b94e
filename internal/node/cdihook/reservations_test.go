// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufrac/gpufrac/internal/node/cdihook"
	"github.com/gpufrac/gpufrac/internal/node/gonvml"
)

// Rebalance sets each ancestor to the live sum, nearest first, keeps an
// ancestor's own hard limit (which also bounds its soft one), skips one
// already right, and stops where NVML reports no per-cgroup limits.
func TestRebalanceWalk(t *testing.T) {
	const root = "/sys/fs/cgroup"
	pod := root + "/kubepods/burstable/pod1"
	current := map[string]nvml.MemoryLimits_v1{
		root + "/kubepods/burstable": {SoftLimit: 5, HardLimit: 100}, // already right
		root + "/kubepods":           {SoftLimit: 90, HardLimit: 6},  // an admin's hard limit of 6
	}
	var sets []string
	dev := &mock.Device{
		GetMemoryLimits_v1Func: func(cg string) (nvml.MemoryLimits_v1, nvml.Return) {
			if cg == pod {
				return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
			}
			if c, ok := current[cg]; ok {
				return c, nvml.SUCCESS
			}
			return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
		},
		SetMemoryLimits_v1Func: func(cg string, soft, hard uint64) nvml.Return {
			sets = append(sets, cg+" "+fmtU(soft)+" "+fmtU(hard))
			return nvml.SUCCESS
		},
	}
	lib := &mock.Interface{
		InitFunc:                  func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:              func() nvml.Return { return nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	live := cdihook.Live{"GPU-a": {pod: 5, root + "/kubepods/burstable": 5, root + "/kubepods": 8}}
	err := cdihook.Rebalance(gonvml.Wrap(lib), cdihook.Cgroup{Path: pod + "/c1", Root: root, V2: true}, []cdihook.Limit{{UUID: "GPU-a", Soft: 5, Hard: 5}}, live)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{pod + " 5 max", root + "/kubepods 6 6"}
	if len(sets) != len(want) || sets[0] != want[0] || sets[1] != want[1] {
		t.Errorf("sets %q, want %q", sets, want)
	}
}

func fmtU(v uint64) string {
	if v == nvml.DEVICE_MEMORY_LIMIT_MAX {
		return "max"
	}
	return strconv.FormatUint(v, 10)
}

// A record directory the hook cannot use costs the rebalance, never the
// container its limits.
func TestUnusableRecordDirStillAppliesLimits(t *testing.T) {
	srv, calls := recordingServer(nvml.SUCCESS)
	u := srv.Devices[0].(*server.Device).UUID
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := cdihook.Run(strings.NewReader(state), cdihook.Options{
		Limits: []cdihook.Limit{{UUID: u, Soft: 1, Hard: 2}}, ProcRoot: procTree(t, "42", v2Cgroup), CgroupRoot: "/sys/fs/cgroup",
		DriverRoot: driverRoot(t), Open: opener(srv), ClaimUID: "uid-1", RecordDir: filepath.Join(file, "sub", "containers"),
	})
	if err != nil || len(*calls) != 1 {
		t.Fatalf("got %v, calls %+v; want the limits applied", err, *calls)
	}
}
