// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// A simulated node's hook takes the real hook's path (library lookup under
// the driver root, cgroup from /proc, the symbol check, NVML's refusals);
// only NVML's final, accepted call is recorded instead of made. So what
// fails on a real node of each kind fails here.
func TestSimulatedNodesAreAsStrictAsRealOnes(t *testing.T) {
	const leaf = "kubepods/burstable/podX/abc"
	for _, tc := range []struct {
		name     string
		node     gpusim.NodeOptions
		libDir   string // where the node's driver installs NVML under its root
		hookRoot string // the --driver-root the hook gets, relative to the host; "" = the node's
		proc     string
		gone     bool // the cgroup is removed before the hook runs
		soft     uint64
		hard     uint64
		want     string // error; "" = recorded
	}{
		{name: "r615, cgroup v2", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem}, proc: "0::/" + leaf + "\n", soft: 40 << 30, hard: 60 << 30},
		{name: "GPU Operator node: NVML only under /run/nvidia/driver", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem},
			libDir: "run/nvidia/driver/usr/lib64", hookRoot: "run/nvidia/driver", proc: "0::/" + leaf + "\n", soft: 1 << 30, hard: 1 << 30},
		{name: "GPU Operator node, hook told the host root", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem},
			libDir: "run/nvidia/driver/usr/lib64", hookRoot: ".", proc: "0::/" + leaf + "\n", soft: 1, hard: 1,
			want: "libnvidia-ml.so.1 not found under the driver root"},
		{name: "r615 on cgroup v2, simulated on a cgroup v1 host", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem},
			proc: "4:memory:/" + leaf + "\n", soft: 1, hard: 1},
		{name: "cgroup v1 node", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem, CgroupV1: true},
			proc: "4:memory:/" + leaf + "\n", soft: 1, hard: 1, want: "NVIDIA per-container GPU memory limits need cgroup v2"},
		{name: "dmem not delegated below the pod's QoS class", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem, DmemUndelegated: "kubepods/burstable"},
			proc: "0::/" + leaf + "\n", soft: 1, hard: 1, want: "ERROR_NOT_FOUND: the cgroup has no GPU memory limit files (dmem controller not enabled"},
		{name: "dmem delegated down to the pod, not below the container", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem, DmemUndelegated: leaf},
			proc: "0::/" + leaf + "\n", soft: 1, hard: 1},
		{name: "older driver (mps node)", node: gpusim.NodeOptions{Enforcement: domain.EnforcementMPS}, proc: "0::/" + leaf + "\n",
			soft: 1, hard: 1, want: "nvmlDeviceSetMemoryLimits_v1 missing"},
		{name: "older driver without MPS (none node)", node: gpusim.NodeOptions{Enforcement: domain.EnforcementNone}, proc: "0::/" + leaf + "\n",
			soft: 1, hard: 1, want: "nvmlDeviceSetMemoryLimits_v1 missing"},
		{name: "a cgroup that no longer exists", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem}, proc: "0::/" + leaf + "\n",
			gone: true, soft: 0, hard: nvml.DEVICE_MEMORY_LIMIT_MAX, want: "ERROR_OPERATING_SYSTEM"},
		{name: "a limit above the GPU's memory", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem}, proc: "0::/" + leaf + "\n",
			soft: 1 << 30, hard: 200 << 30, want: "a limit is above the GPU's total memory"},
		{name: "no limit (hard = NVML's maximum)", node: gpusim.NodeOptions{Enforcement: domain.EnforcementDMem}, proc: "0::/" + leaf + "\n",
			soft: 0, hard: nvml.DEVICE_MEMORY_LIMIT_MAX},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := t.TempDir()
			node, err := gpusim.NewNodeWith("h200x2", "n", tc.node)
			if err != nil {
				t.Fatal(err)
			}
			libDir := tc.libDir
			if libDir == "" {
				libDir = "sim-driver/usr/lib/x86_64-linux-gnu"
			}
			if _, err := gpusim.InstallDriver(host, libDir, node.Driver); err != nil {
				t.Fatal(err)
			}
			hookRoot := filepath.Join(host, "sim-driver")
			if tc.hookRoot != "" {
				hookRoot = filepath.Join(host, tc.hookRoot)
			}
			cgroupRoot := filepath.Join(host, "cgroup")
			cgDir := filepath.Join(cgroupRoot, leaf)
			if strings.Contains(tc.proc, "memory") {
				cgDir = filepath.Join(cgroupRoot, "memory", leaf)
			}
			if err := os.MkdirAll(cgDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.gone {
				if err := os.Remove(cgDir); err != nil {
					t.Fatal(err)
				}
			}
			rec := filepath.Join(host, gpusim.RecordFile)
			uuid := node.Driver.GPUs[1].UUID
			err = cdihook.Run(strings.NewReader(state), cdihook.Options{
				Limits:   []cdihook.Limit{{UUID: uuid, Soft: tc.soft, Hard: tc.hard}},
				ProcRoot: procTree(t, "42", tc.proc), CgroupRoot: cgroupRoot, DriverRoot: hookRoot,
				Open: func(path string) (purenvml.Interface, error) { return gpusim.OpenDriver(path, rec) },
			})
			records, rerr := gpusim.ReadRecords(rec)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				if len(records) != 0 {
					t.Errorf("a refused call was recorded: %+v", records)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The set, then the root's reservation forced to 0 (NVIDIA's
			// deployment model; TestRootReservationIsZeroAfterEverySet).
			rootCg := filepath.Dir(filepath.Dir(filepath.Dir(cgDir)))
			want := []gpusim.LimitRecord{{UUID: uuid, Cgroup: cgDir, Soft: tc.soft, Hard: tc.hard},
				{UUID: uuid, Cgroup: rootCg, Soft: 0, Hard: nvml.DEVICE_MEMORY_LIMIT_MAX}}
			if len(records) != 2 || records[0] != want[0] || records[1] != want[1] {
				t.Errorf("records %+v, want %+v", records, want)
			}
		})
	}
}

// The simulated driver refuses to pose as a real library and a real
// library file is not a simulated driver.
func TestOpenDriverRefusesARealLibrary(t *testing.T) {
	lib := writeLib(t, t.TempDir(), "libnvidia-ml.so.1")
	if _, err := gpusim.OpenDriver(lib, filepath.Join(t.TempDir(), "rec")); err == nil || !strings.Contains(err.Error(), "is not a simulated NVIDIA driver") {
		t.Errorf("got %v", err)
	}
}
