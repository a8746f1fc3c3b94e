// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package launcher

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestNewPlan(t *testing.T) {
	hostTrees := []Mount{
		{Source: "/proc", Target: "/driver-root/proc"},
		{Source: "/dev", Target: "/driver-root/dev"},
		{Source: "/sys", Target: "/driver-root/sys"},
		{FSType: "tmpfs", Target: "/driver-root/tmp"},
	}
	for _, tc := range []struct {
		name    string
		root    string
		env     []string
		bind    []string
		mounts  []Mount
		wantEnv []string
		err     string
	}{{
		name: "the daemon: pipe, log and config bound under the private /tmp, their variables rewritten",
		root: "/driver-root",
		env:  []string{"PATH=/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/mps/pipe", "CUDA_MPS_LOG_DIRECTORY=/mps/log", "GPUFRAC_MPS_CONFIG=/mps/config/", "CUDA_VISIBLE_DEVICES=GPU-a"},
		bind: DefaultBindEnv,
		mounts: append(hostTrees,
			Mount{Source: "/mps/pipe", Target: "/driver-root/tmp/gpufrac-mps/cuda_mps_pipe_directory"},
			Mount{Source: "/mps/log", Target: "/driver-root/tmp/gpufrac-mps/cuda_mps_log_directory"},
			Mount{Source: "/mps/config", Target: "/driver-root/tmp/gpufrac-mps/gpufrac_mps_config"}),
		wantEnv: []string{"CUDA_VISIBLE_DEVICES=GPU-a", "PATH=" + RootPath,
			"CUDA_MPS_PIPE_DIRECTORY=/tmp/gpufrac-mps/cuda_mps_pipe_directory",
			"CUDA_MPS_LOG_DIRECTORY=/tmp/gpufrac-mps/cuda_mps_log_directory",
			"GPUFRAC_MPS_CONFIG=/tmp/gpufrac-mps/gpufrac_mps_config"},
	}, {
		name:    "nvidia-smi alone: nothing bound",
		root:    "/driver-root/",
		env:     []string{"HOME=/root"},
		mounts:  hostTrees,
		wantEnv: []string{"HOME=/root", "PATH=" + RootPath},
	}, {
		name: "relative root", root: "driver-root", err: `--driver-root "driver-root": must be an absolute path`,
	}, {
		name: "the launcher's own root", root: "/", err: `--driver-root "/": must be where the host's driver root is mounted`,
	}, {
		name: "unset variable", root: "/driver-root", bind: []string{"CUDA_MPS_PIPE_DIRECTORY"},
		err: "--bind-env CUDA_MPS_PIPE_DIRECTORY: the variable is not set",
	}, {
		name: "relative directory", root: "/driver-root", env: []string{"GPUFRAC_MPS_CONFIG=mps"}, bind: []string{"GPUFRAC_MPS_CONFIG"},
		err: `--bind-env GPUFRAC_MPS_CONFIG="mps": must be an absolute path`,
	}, {
		name: "named twice", root: "/driver-root", env: []string{"A=/a"}, bind: []string{"A", "A"},
		err: "--bind-env A: named twice",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(tc.root, tc.env, tc.bind)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Mounts, tc.mounts) {
				t.Errorf("mounts\n got %+v\nwant %+v", p.Mounts, tc.mounts)
			}
			if !reflect.DeepEqual(p.Env, tc.wantEnv) {
				t.Errorf("env\n got %q\nwant %q", p.Env, tc.wantEnv)
			}
		})
	}
}

func TestFindInRoot(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "usr/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := FindInRoot(root, "nvidia-cuda-mps-control"); err == nil || !strings.Contains(err.Error(), "not found under the driver root") {
		t.Errorf("an empty driver root: got %v", err)
	}
	// Not executable: not a binary the launcher could run.
	if err := os.WriteFile(filepath.Join(bin, "nvidia-cuda-mps-control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindInRoot(root, "nvidia-cuda-mps-control"); err == nil {
		t.Error("a non-executable file counts as the binary")
	}
	if err := os.Chmod(filepath.Join(bin, "nvidia-cuda-mps-control"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindInRoot(root, "nvidia-cuda-mps-control"); err != nil || got != filepath.Join(bin, "nvidia-cuda-mps-control") {
		t.Errorf("got %q, %v", got, err)
	}
	// An absolute symlink points into the host's view, not the root's:
	// its presence is enough.
	if err := os.Symlink("/usr/bin/nvidia-cuda-mps-control", filepath.Join(bin, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	if _, err := FindInRoot(root, "nvidia-smi"); err != nil {
		t.Error(err)
	}
}
