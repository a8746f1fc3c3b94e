// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLauncherEntry measures what running the node's own MPS binaries
// costs the daemon Pod beyond running them directly: gpufrac-mps-launcher's
// private mount namespace, its binds of /proc, /dev, /sys and the MPS
// directories, and the chroot into the driver root, paid once per
// container start and once per probe (the script's own CLI calls run
// inside the chroot and pay nothing). Baseline: the driver root's sh run
// directly on the host, in the same run. Needs root (the chroot).
func BenchmarkLauncherEntry(b *testing.B) {
	launcher, root := buildDouble(b)
	dirs := b.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "GPUFRAC_DRIVER_ROOT=" + root}
	for _, d := range []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "GPUFRAC_MPS_CONFIG"} {
		p := filepath.Join(dirs, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			b.Fatal(err)
		}
		env = append(env, d+"="+p)
	}
	run := func(argv ...string) time.Duration {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return time.Since(t0)
	}
	var direct, launched time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		direct += run(filepath.Join(root, "bin/sh"), "-c", "true")
		launched += run(launcher, "--", "sh", "-c", "true")
	}
	n := time.Duration(b.N)
	b.Logf("\n%-58s %10s %7s\n%-58s %10s %7s\n%-58s %10s %7.2f",
		"run the driver root's sh -c true (per run)", "mean", "ratio",
		"directly on the host (baseline)", (direct / n).Round(time.Microsecond), "1.00",
		"through gpufrac-mps-launcher (namespace, binds, chroot)", (launched / n).Round(time.Microsecond), float64(launched)/float64(direct))
	b.ReportMetric(float64(direct/n)/1e3, "direct-us")
	b.ReportMetric(float64(launched/n)/1e3, "launcher-us")
}
