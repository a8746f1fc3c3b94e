// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim

import (
	"encoding/json"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// UsageFile is the file, under the plugin data directory of a simulated
// node, that says how much GPU memory each simulated container holds: a
// JSON object of GPU UUID to cgroup path to bytes. Nothing runs CUDA on a simulated node, so tests
// write it to make containers borrow or reach their limits.
const UsageFile = "simulated-usage.json"

// AnswerSimulatedUsage makes srv's GPUs report, in GetMemoryLimits_v1's
// currentUsed, the use path gives for the cgroup, on top of the limits
// already answered (AnswerRecordedLimits). As on a real node, use never
// exceeds the hard limit (the driver refuses an allocation that would
// cross it), and a cgroup without limits stays NOT_FOUND.
func AnswerSimulatedUsage(srv *server.Server, path string) {
	for _, d := range srv.Devices {
		dev := d.(*server.Device)
		uuid, limits := dev.UUID, dev.GetMemoryLimits_v1Func
		if limits == nil {
			continue
		}
		dev.GetMemoryLimits_v1Func = func(cgroup string) (nvml.MemoryLimits_v1, nvml.Return) {
			lim, ret := limits(cgroup)
			if ret != nvml.SUCCESS {
				return lim, ret
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return lim, ret
			}
			var use map[string]map[string]uint64
			if json.Unmarshal(raw, &use) != nil {
				return lim, ret
			}
			used := use[uuid][cgroup]
			if lim.HardLimit > 0 && used > lim.HardLimit {
				used = lim.HardLimit
			}
			lim.CurrentUsed = used
			return lim, ret
		}
	}
}
