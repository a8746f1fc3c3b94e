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
// ("615.23.01"): one shared-context server pinned to the GPU, memacct on
// (the server side of eviction) with its audit log, and context sharing
// on except for the main socket's per-UID servers, which TimeSlicing
// clients use on their own contexts (KAI's production settings).
func DaemonTOML(driverVersion, server, gpuUUID string) (string, error) {
	branch, err := domain.DriverMajor(driverVersion)
	if err != nil {
		return "", fmt.Errorf("MPS v3 configuration: driver version %q: %w", driverVersion, err)
	}
	if branch < 615 {
		return "", fmt.Errorf("MPS v3 configuration: driver branch %d has no MPS v3 (r615 and later)", branch)
	}
	keys := []tomlKey{
		{"", "schema_version", `"1.0"`, 615},
		{"servers." + server, "allowed_devices", fmt.Sprintf("%q", gpuUUID), 615},
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
