// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	corev1 "k8s.io/api/core/v1"
)

// The daemons' last known readiness, for gpufrac_mps_daemon_ready. A
// daemon's health check is its Pod's readiness probe (the control daemon
// answers and has applied its settings: mps-control-daemon.yaml); the
// reconcile loop reads the Pods on every change of one (the watch) and at
// least every interval, and Acquire sees a daemon turn ready. A scrape reads
// what they saw last instead of asking the API or the daemon.

// noteReady records what Acquire saw of the GPU's daemon.
func (m *Manager) noteReady(gpu string, ready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready[gpu] = ready
}

// noteListed records the readiness of the daemons reconcile listed: a GPU
// claims use whose daemon is missing, stopping or failing its probe is not
// ready. GPUs no claim uses are forgotten.
func (m *Manager) noteListed(running map[string]*corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for gpu := range m.ready {
		if len(m.users[gpu]) == 0 {
			delete(m.ready, gpu)
		}
	}
	for gpu, us := range m.users {
		if len(us) == 0 {
			continue
		}
		pod := running[gpu]
		m.ready[gpu] = pod != nil && podReady(pod)
	}
}

// Ready reports, for every GPU whose daemon claims use, whether that daemon
// passed its health check when last seen. A GPU claims use whose daemon
// has not been seen yet is not ready.
func (m *Manager) Ready() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for gpu, us := range m.users {
		if len(us) > 0 {
			out[gpu] = m.ready[gpu]
		}
	}
	return out
}
