// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nvmldiscovery_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func cgroupV2Root(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("cpu memory dmem\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func found(string) (string, error)    { return "/usr/bin/nvidia-cuda-mps-control", nil }
func notFound(string) (string, error) { return "", errors.New("not found") }

func TestDiscoverDGXH200(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.New()
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{CgroupRoot: cgroupV2Root(t), LookPath: notFound})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 8 {
		t.Fatalf("found %d GPUs, want 8", len(inv.GPUs))
	}
	g := inv.GPUs[3]
	want := srv.Devices[3].(*server.Device)
	if g.UUID != want.UUID || g.Index != 3 || g.Minor != 3 {
		t.Errorf("GPU 3 = %+v, want uuid %s index 3 minor 3", g, want.UUID)
	}
	if g.ProductName != "NVIDIA H200 141GB HBM3e" || g.Architecture != "Hopper" || g.CUDAComputeCapability != "9.0" {
		t.Errorf("GPU 3 description %+v", g)
	}
	if g.MemoryBytes != 144384<<20 {
		t.Errorf("memory %d, want %d", g.MemoryBytes, uint64(144384<<20))
	}
	if inv.DriverVersion != "550.54.15" || inv.CUDADriverVersion != "12.4" {
		t.Errorf("driver %q cuda %q, want 550.54.15 and 12.4", inv.DriverVersion, inv.CUDADriverVersion)
	}
	// The mock NVML exports every symbol, the cgroup root is v2.
	if inv.Enforcement != domain.EnforcementDMem {
		t.Errorf("enforcement %s, want dmem", inv.Enforcement)
	}
	if inv.MPSVersion != domain.MPSVersionNone {
		t.Errorf("MPS version %s without the control binary, want none", inv.MPSVersion)
	}
}

// A GPU whose MIG mode is on but that has no instance offers nothing: not
// fractions (its memory belongs to MIG) and no instance. The instances of
// a configured one are tested with simulated layouts (internal/sim/gpusim).
func TestDiscoverSkipsMIGEnabledGPUsWithoutInstances(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.New()
	migDev := srv.Devices[1].(*server.Device)
	if ret, _ := migDev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	// NVML on a MIG GPU without instances: a maximum, and no handle at
	// any index.
	migDev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	migDev.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{CgroupRoot: cgroupV2Root(t), LookPath: notFound})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 7 {
		t.Errorf("found %d GPUs, want 7", len(inv.GPUs))
	}
	if _, ok := inv.GPUByUUID(migDev.UUID); ok {
		t.Error("the MIG-enabled GPU is offered")
	}
	if len(inv.MIGDevices) != 0 {
		t.Errorf("MIG instances %+v on a GPU without any", inv.MIGDevices)
	}
	if len(inv.Skipped) != 1 || inv.Skipped[0].UUID != migDev.UUID || !strings.Contains(inv.Skipped[0].Reason, "no MIG instance") {
		t.Errorf("skipped = %+v, want the MIG GPU with its reason", inv.Skipped)
	}
}

func TestDiscoverEnforcement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		symbol     bool
		cgroupV2   bool
		mps        bool
		driver     string
		force      domain.Enforcement
		want       domain.Enforcement
		wantMPSVer string
	}{
		{name: "r615 on cgroup v2", symbol: true, cgroupV2: true, mps: true, driver: "615.23.01", want: "dmem", wantMPSVer: "v3"},
		{name: "limits symbol but cgroup v1", symbol: true, cgroupV2: false, mps: true, driver: "615.23.01", want: "mps", wantMPSVer: "v3"},
		{name: "old driver with MPS", symbol: false, cgroupV2: true, mps: true, driver: "570.86.10", want: "mps", wantMPSVer: "legacy"},
		{name: "old driver without MPS", symbol: false, cgroupV2: true, mps: false, driver: "570.86.10", want: "none", wantMPSVer: "none"},
		{name: "forced by the simulator", symbol: false, cgroupV2: false, mps: false, driver: "570.86.10", force: "dmem", want: "dmem", wantMPSVer: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			srv := dgxh200.New()
			srv.DriverVersion = tc.driver
			srv.LookupSymbolFunc = func(symbol string) error {
				if symbol == "nvmlDeviceSetMemoryLimits_v1" && !tc.symbol {
					return errors.New("undefined symbol")
				}
				return nil
			}
			opts := nvmldiscovery.Options{CgroupRoot: t.TempDir(), LookPath: notFound, ForceEnforcement: tc.force}
			if tc.cgroupV2 {
				opts.CgroupRoot = cgroupV2Root(t)
			}
			if tc.mps {
				opts.LookPath = found
			}
			inv, err := nvmldiscovery.Discover(ctx, srv, opts)
			if err != nil {
				t.Fatal(err)
			}
			if inv.Enforcement != tc.want || inv.MPSVersion != tc.wantMPSVer {
				t.Errorf("enforcement %s mps %s, want %s %s", inv.Enforcement, inv.MPSVersion, tc.want, tc.wantMPSVer)
			}
		})
	}
}

func TestDiscoverFailsWithoutNVML(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.New()
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	_, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{})
	if err == nil || !strings.Contains(err.Error(), "initialising NVML") {
		t.Errorf("got %v, want an error saying NVML could not be initialised", err)
	}
}
