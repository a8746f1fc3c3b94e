// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func newNode(t *testing.T, enforcement domain.Enforcement) *gpusim.Node {
	t.Helper()
	node, err := gpusim.NewNodeWith("h100x2", "node-a", gpusim.NodeOptions{Enforcement: enforcement})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// installMPS puts an executable nvidia-cuda-mps-control into root's
// usr/bin, as the test tiers install the MPS double.
func installMPS(t *testing.T, root string) {
	t.Helper()
	dir := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia-cuda-mps-control"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestConfigureOnTheHostRootUsesADriverRootOfItsOwn(t *testing.T) {
	dataDir := t.TempDir()
	node := newNode(t, domain.EnforcementDMem)
	cfg := plugin.Config{}
	lib, err := Configure(&cfg, node, Paths{DriverRoot: "/", DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	root := DriverRootIn(dataDir)
	if cfg.CDI.DriverRoot != root {
		t.Errorf("CDI driver root = %q, want %q", cfg.CDI.DriverRoot, root)
	}
	if want := filepath.Join(root, "usr", "lib64", "libnvidia-ml.so.1"); lib != want {
		t.Errorf("simulated driver at %q, want %q", lib, want)
	}
	// The hook loads what was installed as the simulated driver.
	if _, err := gpusim.OpenDriver(lib, filepath.Join(dataDir, gpusim.RecordFile)); err != nil {
		t.Errorf("opening the installed driver: %v", err)
	}
	if cfg.NVML != node.NVML {
		t.Error("cfg.NVML is not the simulated node's server")
	}
	if cfg.CDI.DeviceNode == nil || cfg.InventoryOptions.CgroupV2 == nil || !cfg.InventoryOptions.CgroupV2() {
		t.Error("device nodes or the cgroup v2 answer of the simulated node are missing")
	}
	if want := []string{"--simulate-record=" + filepath.Join(dataDir, gpusim.RecordFile)}; len(cfg.CDI.HookArgs) != 1 || cfg.CDI.HookArgs[0] != want[0] {
		t.Errorf("hook args = %q, want %q", cfg.CDI.HookArgs, want)
	}
	if want := filepath.Join(dataDir, gpusim.HealthFile); cfg.Health.SimulatedFile != want {
		t.Errorf("health file = %q, want %q", cfg.Health.SimulatedFile, want)
	}
}

func TestConfigureKeepsAnExplicitDriverRoot(t *testing.T) {
	root := t.TempDir()
	cfg := plugin.Config{}
	lib, err := Configure(&cfg, newNode(t, domain.EnforcementDMem), Paths{DriverRoot: root, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CDI.DriverRoot != root || filepath.Dir(filepath.Dir(filepath.Dir(lib))) != root {
		t.Errorf("driver root %q, driver %q: want both under %q", cfg.CDI.DriverRoot, lib, root)
	}
}

// MPS is found only where the simulated driver has it and the driver root
// holds the binary, as on a real node.
func TestConfigureFindsMPSOnlyInTheDriverRoot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		enforcement domain.Enforcement
		installed   bool
		want        bool
	}{
		{"mps driver, binary installed", domain.EnforcementMPS, true, true},
		{"mps driver, no binary", domain.EnforcementMPS, false, false},
		{"driver without MPS, binary installed", domain.EnforcementNone, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.installed {
				installMPS(t, root)
			}
			cfg := plugin.Config{}
			if _, err := Configure(&cfg, newNode(t, tc.enforcement), Paths{DriverRoot: root, DataDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			path, err := cfg.InventoryOptions.LookPath("nvidia-cuda-mps-control")
			if got := err == nil; got != tc.want {
				t.Fatalf("LookPath = %q, %v; want found %v", path, err, tc.want)
			}
			if tc.want && path != filepath.Join(root, "usr", "bin", "nvidia-cuda-mps-control") {
				t.Errorf("LookPath = %q, want the driver root's binary", path)
			}
		})
	}
}
