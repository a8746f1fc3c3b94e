// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim_test

import (
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func uuids(t *testing.T, spec, node string) []string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New(spec, node)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range inv.GPUs {
		out = append(out, g.UUID)
	}
	return out
}

func TestUUIDsAreStablePerNodeAndDistinctAcrossNodes(t *testing.T) {
	a1, a2, b := uuids(t, "h200x4", "node-a"), uuids(t, "h200x4", "node-a"), uuids(t, "h200x4", "node-b")
	seen := map[string]bool{}
	for i := range a1 {
		if a1[i] != a2[i] {
			t.Errorf("GPU %d of node-a changed uuid across restarts: %s vs %s", i, a1[i], a2[i])
		}
		if seen[a1[i]] || seen[b[i]] || a1[i] == b[i] {
			t.Errorf("uuid collision at GPU %d: %s / %s", i, a1[i], b[i])
		}
		seen[a1[i]], seen[b[i]] = true, true
	}
}

func TestMixedModelsAndBusIDs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New("h100x1,b200x1", "n")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 2 || inv.GPUs[0].ProductName != "NVIDIA H100 80GB HBM3" || inv.GPUs[1].Architecture != "Blackwell" {
		t.Fatalf("got %+v", inv.GPUs)
	}
	if inv.GPUs[1].PCIBusID != "0000:01:00.0" {
		t.Errorf("bus id %q, want 0000:01:00.0", inv.GPUs[1].PCIBusID)
	}
	if inv.DriverVersion != gpusim.DriverVersion {
		t.Errorf("driver %s, want %s", inv.DriverVersion, gpusim.DriverVersion)
	}
}

func TestNodeIsCoherentPerEnforcement(t *testing.T) {
	for _, tc := range []struct {
		enforcement domain.Enforcement
		driver      string
		mps         string
	}{
		{domain.EnforcementDMem, gpusim.DriverVersion, domain.MPSVersionV3},
		{domain.EnforcementMPS, gpusim.OldDriverVersion, domain.MPSVersionLegacy},
		{domain.EnforcementNone, gpusim.OldDriverVersion, domain.MPSVersionNone},
	} {
		t.Run(string(tc.enforcement), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node, err := gpusim.NewNode("h200x1", "n", tc.enforcement)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := nvmldiscovery.Discover(ctx, node.NVML, node.InventoryOptions)
			if err != nil {
				t.Fatal(err)
			}
			if inv.Enforcement != tc.enforcement || inv.DriverVersion != tc.driver || inv.MPSVersion != tc.mps {
				t.Errorf("got enforcement %s driver %s mps %s; want %s %s %s",
					inv.Enforcement, inv.DriverVersion, inv.MPSVersion, tc.enforcement, tc.driver, tc.mps)
			}
		})
	}
	if _, err := gpusim.NewNode("h200x1", "n", "cgroup"); err == nil {
		t.Error("an unknown enforcement was accepted")
	}
}

// A simulated GPU reports, per cgroup, the limits the simulated hook
// recorded there last, and nothing for other cgroups.
func TestAnswerRecordedLimits(t *testing.T) {
	srv, err := gpusim.New("h200x2", "n")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), gpusim.RecordFile)
	gpusim.AnswerRecordedLimits(srv, path)
	gpu0, _ := srv.DeviceGetHandleByIndex(0)
	uuid, _ := gpu0.GetUUID()
	if _, ret := gpu0.GetMemoryLimits_v1("/cg/a"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("no record yet: %v, want NOT_FOUND", ret)
	}
	lib, err := gpusim.InstallDriver(t.TempDir(), "usr/lib64", gpusim.DriverFor(srv, true))
	if err != nil {
		t.Fatal(err)
	}
	hook, err := gpusim.OpenDriver(lib, path)
	if err != nil {
		t.Fatal(err)
	}
	cg := t.TempDir()
	dev, _ := hook.DeviceGetHandleByUUID(uuid)
	for _, hard := range []uint64{60 << 30, 50 << 30} {
		if ret := dev.SetMemoryLimits_v1(cg, 40<<30, hard); ret != purenvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	got, ret := gpu0.GetMemoryLimits_v1(cg)
	if ret != nvml.SUCCESS || got.SoftLimit != 40<<30 || got.HardLimit != 50<<30 || got.CurrentUsed != 0 {
		t.Errorf("got %+v %v, want the latest record: soft 40Gi, hard 50Gi, none used", got, ret)
	}
	gpu1, _ := srv.DeviceGetHandleByIndex(1)
	if _, ret := gpu1.GetMemoryLimits_v1(cg); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("another GPU answers for gpu-0's record: %v", ret)
	}
}

// The simulated dmem backend raises every ancestor's reservation by a
// leaf's soft limit, and only a reset through NVML while the leaf exists
// takes it back: a leaf deleted with its limit set leaks into every
// ancestor, as NVIDIA documents.
func TestReservationsPropagateAndLeak(t *testing.T) {
	const root = "/sys/fs/cgroup"
	const pod = root + "/kubepods/burstable/pod1"
	g := "GPU-a"
	recs := []gpusim.LimitRecord{
		{UUID: g, Cgroup: pod + "/c1", Soft: 10 << 30, Hard: 20 << 30},
		{UUID: g, Cgroup: pod + "/c2", Soft: 5 << 30, Hard: 5 << 30},
		{UUID: g, Cgroup: pod + "/c1", Soft: 0, Hard: nvml.DEVICE_MEMORY_LIMIT_MAX}, // c1 reset before its cgroup went
		{UUID: "GPU-b", Cgroup: pod + "/c3", Soft: 1 << 30, Hard: 1 << 30},
	}
	got := gpusim.Reservations(recs, root)
	for cg, want := range map[string]uint64{pod: 5 << 30, root + "/kubepods/burstable": 5 << 30, root + "/kubepods": 5 << 30, pod + "/c2": 5 << 30, pod + "/c1": 0} {
		if got[g][cg] != want {
			t.Errorf("GPU-a %s reserved %d, want %d", cg, got[g][cg], want)
		}
	}
	if _, ok := got[g][root]; ok {
		t.Errorf("the hierarchy's root got a reservation: %v", got[g])
	}
	if got["GPU-b"][root+"/kubepods"] != 1<<30 {
		t.Errorf("GPU-b kubepods %d, want 1Gi", got["GPU-b"][root+"/kubepods"])
	}
	// c2 ends without a reset: nothing is recorded, its 5Gi stay reserved.
	if got[g][root+"/kubepods"] != 5<<30 {
		t.Errorf("leak not modelled")
	}
}

// Detection runs on a simulated node as on a real one: a cgroup v1 node
// with an r615 driver offers no per-cgroup limits (it has MPS, so mps),
// and an older driver has no nvmlDeviceSetMemoryLimits_v1.
func TestSimulatedNodesAreDetectedNotForced(t *testing.T) {
	for _, tc := range []struct {
		opts gpusim.NodeOptions
		want domain.Enforcement
		sym  bool
	}{
		{gpusim.NodeOptions{Enforcement: domain.EnforcementDMem}, domain.EnforcementDMem, true},
		{gpusim.NodeOptions{Enforcement: domain.EnforcementDMem, CgroupV1: true}, domain.EnforcementMPS, true},
		{gpusim.NodeOptions{Enforcement: domain.EnforcementMPS}, domain.EnforcementMPS, false},
		{gpusim.NodeOptions{Enforcement: domain.EnforcementNone}, domain.EnforcementNone, false},
	} {
		_, ctx := ktesting.NewTestContext(t)
		node, err := gpusim.NewNodeWith("h200x1", "n", tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if node.InventoryOptions.ForceEnforcement != "" {
			t.Errorf("%+v: enforcement forced", tc.opts)
		}
		inv, err := nvmldiscovery.Discover(ctx, node.NVML, node.InventoryOptions)
		if err != nil {
			t.Fatal(err)
		}
		if inv.Enforcement != tc.want {
			t.Errorf("%+v: detected %s, want %s", tc.opts, inv.Enforcement, tc.want)
		}
		if got := node.NVML.LookupSymbol(gpusim.SetMemoryLimitsSymbol) == nil; got != tc.sym || node.Driver.HasSetMemoryLimits() != tc.sym {
			t.Errorf("%+v: symbol present %v, want %v", tc.opts, got, tc.sym)
		}
	}
}
