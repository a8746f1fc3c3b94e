// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// ShmSource names the tmpfs of a container's /dev/shm in its mount table.
const ShmSource = "gpufrac-shm"

// mounts are the node files a claim's containers see besides their device
// nodes, and what keeps tenants apart (docs/security.md, "Tenants"):
//
//   - /dev/shm is a tmpfs of the container's own: a CDI mount of type
//     tmpfs, which the runtime creates for each container and frees with
//     it, so nothing of it is on the host and nothing outlives the claim's
//     containers. It replaces the per-GPU host directory every MPS client
//     of a GPU shared. Its own, not the daemon's: NVIDIA documents that
//     daemon, server and clients talk through the pipe directory's named
//     pipes and sockets (appendix-environment-variables), and NVIDIA's
//     own client setups bind that directory alone (KAI's MPS guide; the
//     Dynamo MPS page: "mount only the namespace directory"). Inferred;
//     test/gpu/run.sh checks a client with a private /dev/shm on a GPU.
//   - The MPS pipe directory of the claim's route alone: an SMSharing
//     claim's own namespace directory (ClientPipeDir); a TimeSlicing
//     claim's the daemon's pipe directory for its main socket, with an
//     empty read-only tmpfs over the shared server's subtree, where every
//     SMSharing claim's namespace socket lives.
//   - Never the daemon's log directory: clients do not write it (the
//     control daemon and the servers do, NVIDIA appendix-logging), and the
//     plugin reads incidents from it (internal/node/mps/evictions.go), so
//     no container may write there.
func mounts(c *plan.Claim, opts Options) []*cdispec.Mount {
	out := []*cdispec.Mount{shmMount(opts.ShmSizeBytes)}
	mps := c.MPS()
	if mps == nil {
		return out
	}
	out = append(out, &cdispec.Mount{
		HostPath: mps.ClientPipeDir(), ContainerPath: ContainerMPSPipeDir,
		Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"},
	})
	if mps.Version == domain.MPSVersionV3 && mps.Namespace == "" {
		// The CDI library orders mounts by depth, so this lands on the
		// bound pipe directory; an unprivileged container cannot unmount
		// it.
		out = append(out, &cdispec.Mount{
			HostPath: "gpufrac-hidden", ContainerPath: SharedServerDir, Type: "tmpfs",
			Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4k", "mode=0555"},
		})
	}
	return out
}

// SharedServerDir is where a TimeSlicing client would find the shared MPS
// v3 server's subtree (its default namespace and every SMSharing claim's
// namespace): an empty tmpfs covers it.
var SharedServerDir = path.Join(ContainerMPSPipeDir, mpslayout.ServerName)

// shmMount is a container's own /dev/shm with the options containerd gives
// a pod's (nosuid, nodev, noexec, mode 1777), capped at size bytes; 0
// leaves the kernel's tmpfs default, half of the node's memory.
func shmMount(size int64) *cdispec.Mount {
	opts := []string{"nosuid", "nodev", "noexec", "mode=1777"}
	if size > 0 {
		opts = append(opts, "size="+strconv.FormatInt(size, 10))
	}
	return &cdispec.Mount{HostPath: ShmSource, ContainerPath: ContainerShmDir, Type: "tmpfs", Options: opts}
}

// ShmSize turns the plugin's --shm-size into bytes. Empty means half of
// the node's memory, MemTotal in meminfo (/proc/meminfo): what the kernel
// gives a tmpfs without a size and what NVIDIA's DRA driver sizes its
// per-claim MPS tmpfs at (cmd/gpu-kubelet-plugin/sharing.go), so a
// workload that sized its /dev/shm with a memory-backed emptyDir, which
// this mount replaces, keeps what it had on NVIDIA's driver. The tmpfs's
// pages count against the writing container's memory limit, which bounds
// it first where the pod sets one.
func ShmSize(value, meminfo string) (int64, error) {
	if value != "" {
		q, err := resource.ParseQuantity(value)
		if err != nil || q.Value() < 1<<20 {
			return 0, fmt.Errorf("--shm-size %q: must be a quantity of at least 1Mi, such as 8Gi (empty: half of the node's memory)", value)
		}
		return q.Value(), nil
	}
	raw, err := os.ReadFile(meminfo)
	if err != nil {
		return 0, fmt.Errorf("reading the node's memory for the default --shm-size: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: MemTotal %q is not '<n> kB'", meminfo, strings.TrimSpace(rest))
		}
		kib, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kib <= 0 {
			return 0, fmt.Errorf("%s: MemTotal %q is not '<n> kB'", meminfo, strings.TrimSpace(rest))
		}
		return kib << 10 / 2, nil
	}
	return 0, fmt.Errorf("%s has no MemTotal line, needed for the default --shm-size", meminfo)
}
