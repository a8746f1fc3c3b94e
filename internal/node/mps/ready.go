// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	corev1 "k8s.io/api/core/v1"
)

// The daemons' last known readiness, for gpufrac_mps_daemon_ready. A
// daemon's health check is its Pod's readiness probe (the control daemon
// answers and has applied its settings: templates/mps-control-daemon.yaml); the
// reconcile loop reads the Pods on every change of one (the watch) and at
// least every interval, and Acquire sees a daemon turn ready. A scrape reads
// what they saw last instead of asking the API or the daemon.

// noteReady records what Acquire saw of the daemon key names.
func (m *Manager) noteReady(key string, ready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready[key] = ready
}

// noteListed records the readiness of the daemons reconcile listed: a
// daemon claims use that is missing, stopping or failing its probe is not
// ready. Daemons no claim uses are forgotten.
func (m *Manager) noteListed(running map[string]*corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key := range m.ready {
		if len(m.users[key]) == 0 {
			delete(m.ready, key)
		}
	}
	for key, us := range m.users {
		if len(us) == 0 {
			continue
		}
		pod := running[key]
		m.ready[key] = pod != nil && podReady(pod)
	}
}

// Ready reports, for every GPU served by a daemon claims use, whether that
// daemon passed its health check when last seen: one entry per GPU, so a
// node server's readiness is reported for each GPU it serves (the same
// value for each). A daemon claims use that has not been seen yet is not
// ready.
func (m *Manager) Ready() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for key, us := range m.users {
		for _, u := range us {
			if b := u.claim.MPS(); b != nil && b.DaemonKey() == key {
				for _, gpu := range servedGPUs(*b) {
					out[gpu] = m.ready[key]
				}
			}
		}
	}
	return out
}
