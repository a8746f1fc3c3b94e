// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus

import "time"

// Status writes and bursts of Prepares. A node's Prepares come in bursts:
// the kubelet preparing every pod after a reboot or a restart of the
// plugin, a job of many pods landing at once. A status write is an API
// server update that etcd makes durable; on the node it costs CPU (the
// client's encoding and the TLS connection), and where the control plane
// shares the node's cores (small clusters, this project's benchmarks) far
// more. It is for people (`kubectl describe resourceclaim`), so it waits
// until Prepares stop arriving for a moment (the burst's quiet time), at
// most burstMax after its Prepare: the pods of the burst start first, and
// the status follows within burstMax. A kill in between loses nothing:
// the restarted plugin writes a prepared claim's missing status
// (Restored).

// DefaultBurstQuiet is the plugin's default quiet time: a Prepare takes a
// few milliseconds, so 50 ms without one means the burst is over.
const DefaultBurstQuiet = 50 * time.Millisecond

// DefaultBurstMax bounds how long a status write waits for its burst to
// end.
const DefaultBurstMax = time.Second

// SetBurst holds back each Prepared write until no Prepared came for quiet,
// at most max after its own (quiet 0: written as soon as a worker is
// free). Call it before Run.
func (w *Writer) SetBurst(quiet, maxWait time.Duration) {
	w.burstQuiet, w.burstMax = quiet, maxWait
}

// burstWait is how much longer d must wait for its burst to end; 0 when it
// is to be written now.
func (w *Writer) burstWait(d desired) time.Duration {
	if d.claim == nil || d.deferUntil.IsZero() {
		return 0
	}
	w.mu.Lock()
	last := w.lastPrepared
	w.mu.Unlock()
	now := w.now()
	quietLeft := last.Add(w.burstQuiet).Sub(now)
	capLeft := d.deferUntil.Sub(now)
	if quietLeft <= 0 || capLeft <= 0 {
		return 0
	}
	return min(quietLeft, capLeft)
}
