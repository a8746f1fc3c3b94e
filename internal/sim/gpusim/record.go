// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim

import (
	"bytes"
	"encoding/json"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// RecordFile is where a simulated node's hook records limits, under the
// plugin data directory.
const RecordFile = "simulated-memory-limits.jsonl"

// HealthFile is the file, under the plugin data directory of a simulated
// node, that makes GPUs unhealthy: a JSON object of GPU UUID to reason (see health.WatchFile).
const HealthFile = "simulated-health.json"

// AnswerRecordedLimits makes srv's GPUs answer GetMemoryLimits_v1 with the
// limits the simulated hook recorded in path for that cgroup (the latest
// record wins) and zero memory in use, as a real dmem node reports an idle
// container: the plugin's per-container metrics then show every container
// the hook saw. Unrecorded cgroups are NOT_FOUND, as on a real node.
func AnswerRecordedLimits(srv *server.Server, path string) {
	for _, d := range srv.Devices {
		dev := d.(*server.Device)
		uuid := dev.UUID
		dev.GetMemoryLimits_v1Func = func(cgroup string) (nvml.MemoryLimits_v1, nvml.Return) {
			raw, err := os.ReadFile(path)
			if err != nil {
				return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
			}
			var found *LimitRecord
			for _, line := range bytes.Split(raw, []byte("\n")) {
				var r LimitRecord
				if json.Unmarshal(line, &r) == nil && r.UUID == uuid && r.Cgroup == cgroup {
					found = &r
				}
			}
			if found == nil {
				return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
			}
			return nvml.MemoryLimits_v1{NameSpace: cgroup, SoftLimit: found.Soft, HardLimit: found.Hard}, nvml.SUCCESS
		}
	}
}
