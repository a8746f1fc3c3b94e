// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// A MIG layout in --simulate-gpus is read back by discovery, through
// go-nvlib's MIG walk, as the instances with their profiles, memory and
// SMs from go-nvml's H100 preset; the other GPUs keep fractions.
func TestSimulatedMIGLayoutIsDiscovered(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New("h100x1,h100x1:mig=3g.40gb+2g.20gb+1g.10gb", "node-m")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 1 || inv.GPUs[0].Index != 0 {
		t.Fatalf("fraction GPUs %+v, want GPU 0 alone", inv.GPUs)
	}
	want := []struct {
		name, profile string
		mib           uint64
		sms           int
	}{
		{"gpu-1-mig-0-0", "3g.40gb", 40960, 48},
		{"gpu-1-mig-1-0", "2g.20gb", 20480, 32},
		{"gpu-1-mig-2-0", "1g.10gb", 10240, 16},
	}
	if len(inv.MIGDevices) != len(want) {
		t.Fatalf("MIG instances %+v, want %d", inv.MIGDevices, len(want))
	}
	for i, w := range want {
		m := inv.MIGDevices[i]
		if m.Name() != w.name || m.Profile != w.profile || m.MemoryBytes != w.mib<<20 || m.Multiprocessors != w.sms {
			t.Errorf("instance %d = %s %s %d bytes %d SMs, want %s %s %d MiB %d SMs", i, m.Name(), m.Profile, m.MemoryBytes, m.Multiprocessors, w.name, w.profile, w.mib, w.sms)
		}
		if m.UUID != catalog.MIGUUID("node-m", 1, m.GIID, 0) || !strings.HasPrefix(m.UUID, "MIG-") {
			t.Errorf("instance %d UUID %s", i, m.UUID)
		}
		if m.Parent.UUID != catalog.GPUUUID("node-m", 1) || m.Parent.Minor != 1 {
			t.Errorf("instance %d parent %+v", i, m.Parent)
		}
	}
}

// The simulated driver refuses what the real one does: a profile the GPU
// does not have, and an instance that does not fit beside the others.
func TestSimulatedMIGLayoutRefusals(t *testing.T) {
	if _, err := gpusim.New("h100x1:mig=5g.50gb", "n"); err == nil || !strings.Contains(err.Error(), "no MIG profile") {
		t.Errorf("unknown profile: %v", err)
	}
	_, err := gpusim.New("h100x1:mig=4g.40gb+4g.40gb", "n")
	if !errors.Is(err, nvml.ERROR_INSUFFICIENT_RESOURCES) {
		t.Errorf("two 4-slice instances on a 7-slice GPU: %v", err)
	}
	if _, err := catalog.ParseGPUs("h100x1:3g.40gb"); err == nil {
		t.Error("a layout without mig= was accepted")
	}
}

// A layout changed under a running node (an instance destroyed, another
// created) is what the next NVML read sees.
func TestSimulatedMIGLayoutChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New("a100x1:mig=3g.40gb+3g.40gb", "n")
	if err != nil {
		t.Fatal(err)
	}
	dev := srv.Devices[0].(*server.Device)
	if err := gpusim.RemoveMIGInstance(dev, 1); err != nil {
		t.Fatal(err)
	}
	gi, err := gpusim.AddMIGInstance(srv, dev, "1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range inv.MIGDevices {
		names = append(names, m.Name()+"="+m.Profile)
	}
	if got, want := strings.Join(names, ","), "gpu-0-mig-0-0=3g.40gb,gpu-0-mig-2-0=1g.10gb"; got != want || gi != 2 {
		t.Errorf("after the change: %s (new GI %d), want %s (GI 2)", got, gi, want)
	}
}

// MIG mode changes as NVML's do, refusals included: not under compute
// processes (NVML_ERROR_IN_USE), and in the simulation not off while GPU
// instances exist; turned on, the GPU has no instance until one is made,
// and discovery reads the GPU as a MIG GPU without instances; turned off,
// as a fraction GPU again.
func TestSimulatedMIGModeChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New("h100x1,h100x1:mig=1g.10gb", "n")
	if err != nil {
		t.Fatal(err)
	}
	plain, mig := srv.Devices[0].(*server.Device), srv.Devices[1].(*server.Device)
	if err := gpusim.SetMIGMode(mig, "n", false); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("turning MIG off with an instance: %v, want NVML_ERROR_IN_USE", err)
	}
	busy := plain.GetComputeRunningProcessesFunc
	plain.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 42}}, nvml.SUCCESS
	}
	if err := gpusim.SetMIGMode(plain, "n", true); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("turning MIG on under a process: %v, want NVML_ERROR_IN_USE", err)
	}
	plain.GetComputeRunningProcessesFunc = busy
	if err := gpusim.SetMIGMode(plain, "n", true); err != nil {
		t.Fatal(err)
	}
	if err := gpusim.RemoveMIGInstance(mig, 0); err != nil {
		t.Fatal(err)
	}
	if err := gpusim.SetMIGMode(mig, "n", false); err != nil {
		t.Fatal(err)
	}
	layout, err := nvmldiscovery.ReadLayout(ctx, srv, nvmldiscovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(layout.GPUs) != 1 || layout.GPUs[0].UUID != mig.UUID || len(layout.MIGDevices) != 0 ||
		len(layout.Skipped) != 1 || layout.Skipped[0].UUID != plain.UUID {
		t.Errorf("layout %+v, want GPU 1 serving fractions and GPU 0 in MIG mode without instances", layout)
	}
}
