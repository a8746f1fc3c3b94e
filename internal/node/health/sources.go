// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// DefaultIgnoredXIDs are XIDs caused by applications, not by the GPU
// (illegal memory access, page faults, preemption, ...): a crashing pod
// must not taint the GPU for everyone. The list NVIDIA's device plugin
// skips by default.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// WatchNVML marks a GPU unhealthy on a critical XID that is not ignored,
// until ctx ends. XIDs that need a GPU reset do not clear by themselves, so
// an unhealthy mark stays until the plugin restarts after the repair.
func WatchNVML(ctx context.Context, lib nvml.Interface, uuids []string, ignored []uint64, m *Monitor) error {
	logger := klog.FromContext(ctx)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initialising NVML for health events: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating an NVML event set: %w", ret)
	}
	defer func() { _ = set.Free() }()
	for _, uuid := range uuids {
		dev, ret := lib.DeviceGetHandleByUUID(uuid)
		if ret == nvml.ERROR_GPU_IS_LOST {
			m.Set(uuid, false, "GPU is lost")
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("opening GPU %s for health events: %w", uuid, ret)
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			// Some GPUs do not report XIDs; they stay healthy, as known.
			logger.Info("GPU does not report XID events; its health is not watched", "gpu", uuid, "reason", ret.Error())
		}
	}
	ignore := map[uint64]bool{}
	for _, x := range ignored {
		ignore[x] = true
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(5000)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret == nvml.ERROR_GPU_IS_LOST:
			for _, uuid := range uuids {
				m.Set(uuid, false, "GPU is lost")
			}
			continue
		case ret != nvml.SUCCESS:
			return fmt.Errorf("waiting for NVML events: %w", ret)
		}
		if data.EventType != nvml.EventTypeXidCriticalError || ignore[data.EventData] {
			continue
		}
		uuid, ret := data.Device.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		reason := fmt.Sprintf("XID %d", data.EventData)
		if m.Set(uuid, false, reason) {
			logger.Info("GPU became unhealthy", "gpu", uuid, "reason", reason)
		}
	}
	return nil
}

// WatchFile reads simulated health from path every interval until ctx
// ends: a JSON object from GPU UUID to a reason; a listed GPU is
// unhealthy, any other healthy. A missing file means all healthy. Tests
// and the demo write it to show taints come and go.
func WatchFile(ctx context.Context, path string, uuids []string, interval time.Duration, m *Monitor) {
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		unhealthy, err := readFile(path)
		if err != nil {
			logger.Error(err, "Reading simulated GPU health; keeping the last state", "path", path)
			return
		}
		for _, uuid := range uuids {
			reason, bad := unhealthy[uuid]
			if m.Set(uuid, !bad, reason) {
				logger.Info("Simulated GPU health changed", "gpu", uuid, "healthy", !bad, "reason", reason)
			}
		}
	}, interval)
}

func readFile(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out map[string]string
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object of GPU UUID to reason: %w", path, err)
	}
	return out, nil
}
