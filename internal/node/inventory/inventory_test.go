package inventory_test

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

	"github.com/gpufrac/gpufrac/internal/node/inventory"
)

func cgroupV2Root(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory dmem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func found(string) (string, error)    { return "/usr/bin/nvidia-cuda-mps-control", nil }
func notFound(string) (string, error) { return "", errors.New("not found") }

func TestDiscoverDGXH200(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.New()
	inv, err := inventory.Discover(ctx, srv, inventory.Options{CgroupRoot: cgroupV2Root(t), LookPath: notFound})
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
	if inv.Enforcement != inventory.EnforcementDMem {
		t.Errorf("enforcement %s, want dmem", inv.Enforcement)
	}
	if inv.MPSVersion != inventory.MPSVersionNone {
		t.Errorf("MPS version %s without the control binary, want none", inv.MPSVersion)
	}
}

func TestDiscoverSkipsMIGEnabledGPUs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv := dgxh200.New()
	migDev := srv.Devices[1].(*server.Device)
	if ret, _ := migDev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	inv, err := inventory.Discover(ctx, srv, inventory.Options{CgroupRoot: cgroupV2Root(t), LookPath: notFound})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 7 {
		t.Errorf("found %d GPUs, want 7", len(inv.GPUs))
	}
	if _, ok := inv.GPUByUUID(migDev.UUID); ok {
		t.Error("the MIG-enabled GPU is offered")
	}
	if len(inv.Skipped) != 1 || inv.Skipped[0].UUID != migDev.UUID || !strings.Contains(inv.Skipped[0].Reason, "MIG is enabled") {
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
		force      inventory.Enforcement
		want       inventory.Enforcement
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
			opts := inventory.Options{CgroupRoot: t.TempDir(), LookPath: notFound, ForceEnforcement: tc.force}
			if tc.cgroupV2 {
				opts.CgroupRoot = cgroupV2Root(t)
			}
			if tc.mps {
				opts.LookPath = found
			}
			inv, err := inventory.Discover(ctx, srv, opts)
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
	_, err := inventory.Discover(ctx, srv, inventory.Options{})
	if err == nil || !strings.Contains(err.Error(), "initialising NVML") {
		t.Errorf("got %v, want an error saying NVML could not be initialised", err)
	}
}

func TestSemver(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"535.104.05", "535.104.5", ""},
		{"615.23", "615.23.0", ""},
		{"13.4", "13.4.0", ""},
		{"9.0", "9.0.0", ""},
		{"1.2.3.4", "", `version "1.2.3.4" has 4 parts, want 1 to 3`},
		{"550.x", "", `version "550.x": part "x" is not a number`},
	} {
		got, err := inventory.Semver(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Semver(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Semver(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseEnforcement(t *testing.T) {
	if _, err := inventory.ParseEnforcement("cgroup"); err == nil || err.Error() != `memory enforcement "cgroup" is not one of dmem, mps, none` {
		t.Errorf("got %v", err)
	}
	if e, err := inventory.ParseEnforcement("mps"); err != nil || e != inventory.EnforcementMPS {
		t.Errorf("got %v %v", e, err)
	}
}

func TestAssignComputeModes(t *testing.T) {
	inv := &inventory.Inventory{GPUs: []inventory.GPU{{Index: 0}, {Index: 1}, {Index: 2}}}
	modes := func() []string {
		var out []string
		for _, g := range inv.GPUs {
			out = append(out, g.ComputeModes)
		}
		return out
	}
	for _, tc := range []struct {
		setting string
		want    []string
		err     string
	}{
		{"", []string{"Any", "Any", "Any"}, ""},
		{"all", []string{"SMSharing", "SMSharing", "SMSharing"}, ""},
		{"none", []string{"TimeSlicing", "TimeSlicing", "TimeSlicing"}, ""},
		{"0, 2", []string{"SMSharing", "TimeSlicing", "SMSharing"}, ""},
		{"7", nil, `--sm-sharing-gpus "7": this node has no GPU 7`},
		{"first", nil, `--sm-sharing-gpus "first": "first" is not a GPU index (want all, none or a list such as 0,1)`},
	} {
		err := inv.AssignComputeModes(tc.setting)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.setting, err, tc.err)
			}
			continue
		}
		if got := modes(); err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: %v %v, want %v", tc.setting, got, err, tc.want)
		}
	}
}
