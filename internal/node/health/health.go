// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package health tracks whether each GPU of the node is healthy. Sources
// feed it (NVML XID events on real GPUs, a watched file on simulated nodes);
// the kubelet plugin reports its state to the kubelet (device health in pod
// status) and turns unhealthy GPUs into NoSchedule device taints on the
// ResourceSlice, so a failing GPU stops receiving claims.
package health

import (
	"sync"
	"time"
)

// Status of one GPU.
type Status struct {
	Healthy bool
	// Reason says why a GPU is unhealthy ("XID 79", ...).
	Reason string
	Since  time.Time
}

// Monitor holds the current health of every GPU, by UUID. GPUs it was never
// told about are healthy.
type Monitor struct {
	mu      sync.Mutex
	state   map[string]Status
	changed chan struct{}
	now     func() time.Time
}

// NewMonitor starts with every GPU healthy.
func NewMonitor() *Monitor {
	return &Monitor{state: map[string]Status{}, changed: make(chan struct{}), now: time.Now}
}

// Set records a GPU's health; watchers hear of it only if it changed.
func (m *Monitor) Set(uuid string, healthy bool, reason string) bool {
	if healthy {
		reason = ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, known := m.state[uuid]
	if (known && cur.Healthy == healthy && cur.Reason == reason) || (!known && healthy) {
		return false
	}
	m.state[uuid] = Status{Healthy: healthy, Reason: reason, Since: m.now()}
	// Wake every watcher by closing the channel they wait on.
	close(m.changed)
	m.changed = make(chan struct{})
	return true
}

// Unhealthy returns the unhealthy GPUs with their reasons.
func (m *Monitor) Unhealthy() map[string]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Status{}
	for uuid, s := range m.state {
		if !s.Healthy {
			out[uuid] = s
		}
	}
	return out
}

// Get returns one GPU's status.
func (m *Monitor) Get(uuid string) Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.state[uuid]; ok {
		return s
	}
	return Status{Healthy: true}
}

// Changed returns a channel closed at the next change.
func (m *Monitor) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}
