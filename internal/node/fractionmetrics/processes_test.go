// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fractionmetrics_test

import (
	"os"
	"path/filepath"
	"strconv"
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

// fakeProc writes /proc/<pid>/cgroup files the way the kernel formats them.
func fakeProc(t *testing.T, procs map[uint32]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, content := range procs {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Without per-cgroup accounting, a container's memory is the sum of its
// processes, and its SM share is the sum of its processes' latest samples:
// both mapped from NVML's host PIDs through /proc/<pid>/cgroup, on a
// cgroup v2 container (with a process in a sub-cgroup) and a v1 one.
func TestProcessAttribution(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.NewWithGPUs(dgxh200.New().Devices[0].(*server.Device).Config)
	gpu := srv.Devices[0].(*server.Device)
	cgroupRoot := t.TempDir()
	cgA := filepath.Join(cgroupRoot, "kubepods/pod-a/ctr-a")
	cgB := filepath.Join(cgroupRoot, "memory/kubepods/pod-b/ctr-b")
	for _, d := range []string{cgA, filepath.Join(cgA, "exec-1"), cgB} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	procRoot := fakeProc(t, map[uint32]string{
		101: "0::/kubepods/pod-a/ctr-a\n",
		102: "0::/kubepods/pod-a/ctr-a/exec-1\n",
		201: "12:memory:/kubepods/pod-b/ctr-b\n3:cpu,cpuacct:/kubepods/pod-b/ctr-b\n",
		301: "0::/system.slice/other.service\n", // a process of no container
		// 401 has exited: NVML still lists it, /proc does not.
	})
	gpu.GetMemoryLimits_v1Func = func(string) (nvml.MemoryLimits_v1, nvml.Return) {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
	}
	gpu.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{
			{Pid: 101, UsedGpuMemory: 10 << 30}, {Pid: 102, UsedGpuMemory: 2 << 30},
			{Pid: 201, UsedGpuMemory: 7 << 30}, {Pid: 301, UsedGpuMemory: 50 << 30}, {Pid: 401, UsedGpuMemory: 1 << 30},
		}, nvml.SUCCESS
	}
	var askedSince uint64
	gpu.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		askedSince = since
		return []nvml.ProcessUtilizationSample{
			{Pid: 101, TimeStamp: 100, SmUtil: 10}, {Pid: 101, TimeStamp: 200, SmUtil: 30}, // latest counts
			{Pid: 102, TimeStamp: 150, SmUtil: 20},
			{Pid: 201, TimeStamp: 180, SmUtil: 80}, {Pid: 201, TimeStamp: 190, SmUtil: 45},
			{Pid: 301, TimeStamp: 200, SmUtil: 90}, {Pid: 401, TimeStamp: 200, SmUtil: 5},
		}, nvml.SUCCESS
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementNone})
	if err != nil {
		t.Fatal(err)
	}
	dev := plan.Device{Device: "gpu-0", ShareID: ptr.To(types.UID("s1")), GPU: inv.GPUs[0],
		SoftLimitBytes: 20 << 30, HardLimitBytes: 20 << 30, ComputeMode: v1alpha1.TimeSlicing, Enforcement: domain.EnforcementNone}
	prepared := []plan.Claim{
		{UID: "uid-a", Namespace: "team", Name: "a", Devices: []plan.Device{dev}},
		{UID: "uid-b", Namespace: "team", Name: "b", Devices: []plan.Device{dev}},
	}
	records := t.TempDir()
	writeRecord(t, records, record.Record{ClaimUID: "uid-a", Namespace: "team", Pod: "pa", Container: "main", Cgroup: cgA, GPUs: []string{gpu.UUID}}, "ca")
	writeRecord(t, records, record.Record{ClaimUID: "uid-b", Namespace: "team", Pod: "pb", Container: "main", Cgroup: cgB, GPUs: []string{gpu.UUID}}, "cb")

	c := fractionmetrics.New(fractionmetrics.Config{
		NodeName: "node-a", Inventory: inv, Prepared: func() []plan.Claim { return prepared }, RecordDir: records, NVML: srv,
		ProcRoot: procRoot, CgroupRoot: cgroupRoot,
	})
	u := gpu.UUID
	want := `
# HELP gpufrac_container_gpu_memory_used_bytes GPU memory a container uses now: NVML's per-cgroup accounting where the node enforces dmem, else the sum over its processes.
# TYPE gpufrac_container_gpu_memory_used_bytes gauge
gpufrac_container_gpu_memory_used_bytes{claim_uid="uid-a",container="main",gpu_uuid="` + u + `",namespace="team",node="node-a",pod="pa"} 1.2884901888e+10
gpufrac_container_gpu_memory_used_bytes{claim_uid="uid-b",container="main",gpu_uuid="` + u + `",namespace="team",node="node-a",pod="pb"} 7.516192768e+09
# HELP gpufrac_container_sm_utilization_percent Percent of the GPU's SMs a container's processes kept busy in NVML's latest per-process samples.
# TYPE gpufrac_container_sm_utilization_percent gauge
gpufrac_container_sm_utilization_percent{claim_uid="uid-a",container="main",gpu_uuid="` + u + `",namespace="team",node="node-a",pod="pa"} 50
gpufrac_container_sm_utilization_percent{claim_uid="uid-b",container="main",gpu_uuid="` + u + `",namespace="team",node="node-a",pod="pb"} 45
`
	before := time.Now()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"gpufrac_container_gpu_memory_used_bytes", "gpufrac_container_sm_utilization_percent"); err != nil {
		t.Error(err)
	}
	// NVML returns samples newer than the timestamp it is given: the
	// collector must ask for recent ones, not the whole ring (0).
	if since := time.UnixMicro(int64(askedSince)); askedSince == 0 || since.After(before) || before.Sub(since) > time.Minute {
		t.Errorf("asked NVML for samples since %v; want a recent window before %v", since, before)
	}
}

// Overlapping samples of several processes cannot add up to more than the
// whole GPU.
func TestSMUtilizationCapped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.NewWithGPUs(dgxh200.New().Devices[0].(*server.Device).Config)
	gpu := srv.Devices[0].(*server.Device)
	cgroupRoot := t.TempDir()
	cg := filepath.Join(cgroupRoot, "pod/ctr")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	procRoot := fakeProc(t, map[uint32]string{1: "0::/pod/ctr\n", 2: "0::/pod/ctr\n"})
	gpu.GetMemoryLimits_v1Func = func(string) (nvml.MemoryLimits_v1, nvml.Return) {
		return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
	}
	gpu.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	gpu.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return []nvml.ProcessUtilizationSample{{Pid: 1, TimeStamp: 1, SmUtil: 70}, {Pid: 2, TimeStamp: 1, SmUtil: 60}}, nvml.SUCCESS
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementNone})
	if err != nil {
		t.Fatal(err)
	}
	prepared := []plan.Claim{{UID: "uid", Namespace: "ns", Name: "c", Devices: []plan.Device{{Device: "gpu-0", GPU: inv.GPUs[0]}}}}
	records := t.TempDir()
	writeRecord(t, records, record.Record{ClaimUID: "uid", Namespace: "ns", Pod: "p", Container: "c", Cgroup: cg, GPUs: []string{gpu.UUID}}, "c")
	c := fractionmetrics.New(fractionmetrics.Config{
		NodeName: "n", Inventory: inv, Prepared: func() []plan.Claim { return prepared }, RecordDir: records, NVML: srv,
		ProcRoot: procRoot, CgroupRoot: cgroupRoot,
	})
	want := `
# HELP gpufrac_container_sm_utilization_percent Percent of the GPU's SMs a container's processes kept busy in NVML's latest per-process samples.
# TYPE gpufrac_container_sm_utilization_percent gauge
gpufrac_container_sm_utilization_percent{claim_uid="uid",container="c",gpu_uuid="` + gpu.UUID + `",namespace="ns",node="n",pod="p"} 100
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpufrac_container_sm_utilization_percent"); err != nil {
		t.Error(err)
	}
	// Neither memory source answered: no made-up zero.
	if n := testutil.CollectAndCount(c, "gpufrac_container_gpu_memory_used_bytes"); n != 0 {
		t.Errorf("%d memory series, want none when NVML reports no usage", n)
	}
}
