// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec_test

import (
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// A claim of two GPUs on the node server reaches that one server: its
// container gets the node server's pipe directory (the main socket for
// TimeSlicing, with the shared server's subtree hidden), per-GPU limits
// for the hook (dmem holds each GPU to its own share), and no
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, whose one entry could name one GPU only.
func TestInjectNodeServerClaimOfTwoGPUs(t *testing.T) {
	const root = "/var/lib/kubelet/plugins/gpufrac.dev/mps"
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, opts())
	if err != nil {
		t.Fatal(err)
	}
	server := []string{"GPU-gpu-0", "GPU-gpu-1"}
	var devs []plan.Device
	for i, name := range []string{"gpu-0", "gpu-1"} {
		d := device(name, i, "s"+name, 60*gib, 70*gib)
		d.MPS = mpslayout.ForNodeServer(root, d.GPU.UUID, server)
		d.MPS.Version = domain.MPSVersionV3
		devs = append(devs, d)
	}
	claim := &plan.Claim{UID: "uid-pair", Namespace: "ns", Name: "pair", Devices: devs}
	spec := writeInjected(t, w, dir, claim)
	env := envOf(spec)
	checkEnv(t, env, map[string]string{
		"NVIDIA_VISIBLE_DEVICES":  "GPU-gpu-0,GPU-gpu-1",
		"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
		cdispec.EnvGPULimits:      "71680,71680",
		cdispec.EnvGPURequests:    "61440,61440",
	})
	if v, ok := env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; ok {
		t.Errorf("env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q on a client of the node server", v)
	}
	checkMounts(t, spec, []oci.Mount{
		shm(opts().ShmSizeBytes),
		{Destination: "/tmp/nvidia-mps", Source: root + "/node/pipe", Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
		{Destination: cdispec.SharedServerDir, Type: "tmpfs", Source: "gpufrac-hidden", Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4k", "mode=0555"}},
	})
}
