// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"fmt"
	"strings"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// ConfigTOMLFile is the MPS v3 configuration the daemon starts with
// (nvidia-cuda-mps-control -a), in the GPU's config directory.
const ConfigTOMLFile = "mps.toml"

// tomlKey is one configuration key and the first driver branch that
// accepts it. NVIDIA, mpsv3-configuration-file (r615/latest): a server
// section accepts only its documented keys and "any other key is a
// configuration error"; the r620 page adds keys (compute_policy,
// timeslice_pct, cgroup, cgroup_depth, force_polling) an r615 daemon
// would refuse. So every key carries its branch and the file is rendered
// for the node's driver.
type tomlKey struct {
	section, key, value string
	minBranch           int
}

// DaemonTOML renders the v3 daemon's configuration for a driver version
// ("615.23.01"): one shared-context server pinned to the GPUs it serves,
// memacct on (the server side of eviction) with its audit log, and context
// sharing on except for the main socket's per-UID servers, which
// TimeSlicing clients use on their own contexts (KAI's production
// settings). gpuUUIDs is one GPU for a per-GPU daemon, or every GPU of a
// node server: NVIDIA's configuration page lists several in one
// allowed_devices, comma-separated ("GPU-abcd-1234,GPU-efgh-5678",
// docs/design/nvidia/mps-multi-gpu.md M1).
func DaemonTOML(driverVersion, server string, gpuUUIDs ...string) (string, error) {
	if err := checkDeviceList(gpuUUIDs); err != nil {
		return "", err
	}
	branch, err := domain.DriverMajor(driverVersion)
	if err != nil {
		return "", fmt.Errorf("MPS v3 configuration: driver version %q: %w", driverVersion, err)
	}
	if branch < 615 {
		return "", fmt.Errorf("MPS v3 configuration: driver branch %d has no MPS v3 (r615 and later)", branch)
	}
	keys := []tomlKey{
		{"", "schema_version", `"1.0"`, 615},
		{"servers." + server, "allowed_devices", fmt.Sprintf("%q", strings.Join(gpuUUIDs, ",")), 615},
		{"features.memacct", "enabled", "true", 615},
		{"features.memacct", "audit_log", "true", 615},
		{"features.context-share", "enabled", "true", 615},
		{"features.context-share", "default_socket", `"off"`, 615},
	}
	var b strings.Builder
	section := ""
	for _, k := range keys {
		if k.minBranch > branch {
			continue
		}
		if k.section != section {
			fmt.Fprintf(&b, "\n[%s]\n", k.section)
			section = k.section
		}
		fmt.Fprintf(&b, "%s = %s\n", k.key, k.value)
	}
	return b.String(), nil
}

// checkDeviceList refuses an allowed_devices list the daemon would read
// wrongly: empty (a server of no GPU), a UUID with the list's separator in
// it, or a GPU twice (a GPU belongs to one server's list once).
func checkDeviceList(gpuUUIDs []string) error {
	if len(gpuUUIDs) == 0 {
		return fmt.Errorf("MPS v3 configuration: allowed_devices: no GPU given; a server serves at least one")
	}
	seen := map[string]bool{}
	for _, u := range gpuUUIDs {
		if u == "" || strings.ContainsAny(u, ", \"") {
			return fmt.Errorf("MPS v3 configuration: allowed_devices: GPU UUID %q is empty or holds a comma, space or quote", u)
		}
		if seen[u] {
			return fmt.Errorf("MPS v3 configuration: allowed_devices: GPU %s listed twice", u)
		}
		seen[u] = true
	}
	return nil
}
