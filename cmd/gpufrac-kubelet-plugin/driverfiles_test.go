// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/plugin"
)

// A real node's specs carry the driver found under --driver-root-mount,
// named by --driver-root; a root without the driver stops the plugin with
// the flag and the folders it searched.
func TestRealNodeSpecsCarryTheDriver(t *testing.T) {
	mount := t.TempDir()
	for _, f := range []string{"usr/lib64/libcuda.so.580.65.06", "usr/lib64/libnvidia-ml.so.580.65.06", "usr/bin/nvidia-smi"} {
		p := filepath.Join(mount, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := &flags{driverRoot: "/run/nvidia/driver", driverRootMount: mount, cdiHookPath: "/hook"}
	var cfg plugin.Config
	if err := realDriverFiles(f, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.CDI.Driver == nil || len(cfg.CDI.Driver.Mounts) != 3 || cfg.CDI.Driver.Mounts[0].HostPath != "/run/nvidia/driver/usr/lib64/libcuda.so.580.65.06" {
		t.Errorf("driver edits %+v, want the 3 files under /run/nvidia/driver", cfg.CDI.Driver)
	}
	if cfg.CDI.DeviceNode == nil {
		t.Error("no device node reader")
	}
	f.driverRootMount = t.TempDir()
	if err := realDriverFiles(f, &cfg); err == nil || !strings.Contains(err.Error(), "--driver-root /run/nvidia/driver") || !strings.Contains(err.Error(), "usr/lib64") {
		t.Errorf("a driver root without the driver: %v, want an error naming the flag and the folders searched", err)
	}
}
