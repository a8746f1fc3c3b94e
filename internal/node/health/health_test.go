// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package health_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/health"
)

func TestMonitorNotifiesOnlyChanges(t *testing.T) {
	m := health.NewMonitor()
	ch := m.Changed()
	if m.Set("GPU-a", true, "") {
		t.Error("a GPU never seen is already healthy; no change")
	}
	if !m.Set("GPU-a", false, "XID 79") {
		t.Fatal("marking unhealthy is a change")
	}
	select {
	case <-ch:
	default:
		t.Error("watchers were not woken")
	}
	if m.Set("GPU-a", false, "XID 79") {
		t.Error("the same state again is no change")
	}
	if st := m.Get("GPU-a"); st.Healthy || st.Reason != "XID 79" {
		t.Errorf("status %+v", st)
	}
	if !m.Set("GPU-a", true, "ignored reason") || len(m.Unhealthy()) != 0 {
		t.Error("recovery not recorded")
	}
}

// TestWatchNVML feeds go-nvml's mock event set an ignored application XID,
// then a critical one: only the critical one makes the GPU unhealthy.
func TestWatchNVML(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := dgxh200.New()
	gpu := srv.Devices[2].(*server.Device)
	for _, d := range srv.Devices {
		d.(*server.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	var mu sync.Mutex
	queue := []nvml.EventData{
		{Device: gpu, EventType: nvml.EventTypeXidCriticalError, EventData: 13},
		{Device: gpu, EventType: nvml.EventTypeXidCriticalError, EventData: 79},
	}
	set := &mock.EventSet{
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if len(queue) == 0 {
				time.Sleep(5 * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := queue[0]
			queue = queue[1:]
			return e, nvml.SUCCESS
		},
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	m := health.NewMonitor()
	done := make(chan error, 1)
	uuids := []string{srv.Devices[0].(*server.Device).UUID, gpu.UUID}
	go func() { done <- health.WatchNVML(ctx, srv, uuids, health.DefaultIgnoredXIDs, m) }()
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !m.Get(gpu.UUID).Healthy, nil
	})
	if err != nil {
		t.Fatal("XID 79 did not make the GPU unhealthy")
	}
	if st := m.Get(gpu.UUID); st.Reason != "XID 79" {
		t.Errorf("reason %q, want XID 79 (XID 13 is an application error)", st.Reason)
	}
	if len(m.Unhealthy()) != 1 {
		t.Errorf("unhealthy %v, want only the GPU with the XID", m.Unhealthy())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v", err)
	}
}
