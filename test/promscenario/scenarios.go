// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"math"
	"time"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/node/fractionmetrics"
)

// The cluster every scenario starts from (step 0 prepares it):
//
//	gpu-node-a gpu-0 (H200): team-a/llm TimeSlicing 40Gi/60Gi, team-a/embed SMSharing 20Gi/30Gi
//	gpu-node-a gpu-1 (H200): team-b/train TimeSlicing 60Gi/90Gi (trainer, sidecar)
//	gpu-node-b gpu-0 (H100): team-b/infer SMSharing 24Gi/32Gi, team-c/notebook TimeSlicing 16Gi/24Gi
//	gpu-node-b gpu-1 (H100): team-c/batch TimeSlicing 20Gi/30Gi, a job from step 2 to step 12
//
// Every container uses half to three quarters of its request, varying
// from step to step: nobody borrows, nobody nears a limit, every MPS daemon
// answers, every GPU is healthy.
var baseShares = []struct {
	node int
	s    share
}{
	{0, share{"team-a", "llm", 0, 40 * gib, 60 * gib, v1alpha1.TimeSlicing, []string{"server"}}},
	{0, share{"team-a", "embed", 0, 20 * gib, 30 * gib, v1alpha1.SMSharing, []string{"worker"}}},
	{0, share{"team-b", "train", 1, 60 * gib, 90 * gib, v1alpha1.TimeSlicing, []string{"trainer", "sidecar"}}},
	{1, share{"team-b", "infer", 0, 24 * gib, 32 * gib, v1alpha1.SMSharing, []string{"server"}}},
	{1, share{"team-c", "notebook", 0, 16 * gib, 24 * gib, v1alpha1.TimeSlicing, []string{"jupyter"}}},
}

var batch = share{"team-c", "batch", 1, 20 * gib, 30 * gib, v1alpha1.TimeSlicing, []string{"job"}}

// prepareTime is a Prepare's latency: an SMSharing claim waits for its
// GPU's MPS daemon to start.
func prepareTime(s share) time.Duration {
	if s.mode == v1alpha1.SMSharing {
		return 2400 * time.Millisecond
	}
	return 180 * time.Millisecond
}

// calm is a container's use at a step: between half and three quarters of
// request, a slow wave with a phase of its own.
func calm(request int64, step, phase int) int64 {
	f := 0.625 + 0.125*math.Sin(float64(step+phase)/3)
	return int64(f * float64(request))
}

// base runs the healthy cluster's step: what every scenario builds on.
func base(w *world, step int) {
	if step == 0 {
		for _, b := range baseShares {
			must(w.nodes[b.node].prepare(b.s, prepareTime(b.s)))
		}
	}
	switch step {
	case 2:
		must(w.nodes[1].prepare(batch, prepareTime(batch)))
	case 12:
		must(w.nodes[1].unprepare(batch.namespace, batch.name, 90*time.Millisecond))
	}
	for i, b := range baseShares {
		n := w.nodes[b.node]
		n.use(b.s.namespace, b.s.name, b.s.containers[0], calm(b.s.request, step, i))
		if len(b.s.containers) > 1 {
			n.use(b.s.namespace, b.s.name, b.s.containers[1], 512<<20)
		}
	}
	if step >= 2 && step < 12 {
		w.nodes[1].use(batch.namespace, batch.name, batch.containers[0], calm(batch.request, step, 7))
	}
}

// must panics on a failure of the simulated world itself (a temporary
// file that cannot be written): Build turns it into its error.
func must(err error) {
	if err != nil {
		panic(scriptError{err})
	}
}

type scriptError struct{ error }

// ramp goes from a to b over steps from..to, and stays at b after.
func ramp(a, b int64, step, from, to int) int64 {
	switch {
	case step <= from:
		return a
	case step >= to:
		return b
	}
	return a + (b-a)*int64(step-from)/int64(to-from)
}

var llmBig = share{"team-d", "llm-big", 0, 30 * gib, 40 * gib, v1alpha1.SMSharing, []string{"server"}}

var scenarios = map[string]scenario{
	"healthy": {steps: 20, script: base,
		promises: append([]string{"gpufrac_unprepare_duration_seconds"}, baseFamilies...)},

	// On gpu-node-b's H100 (80Gi), team-d/llm-big joins at step 1 (requests
	// 70Gi, limits 96Gi); from step 3 team-b/infer climbs above its 24Gi
	// request to 30.5Gi by step 12, while the GPU's total use reaches
	// 74.5Gi of 80Gi: a borrower MPS evicts first if llm-big needs its
	// request.
	"borrowing-near-full": {steps: 20, promises: append([]string{"gpufrac_incidents_total"}, baseFamilies...),
		script: func(w *world, step int) {
			base(w, step)
			b := w.nodes[1]
			if step == 1 {
				must(b.prepare(llmBig, prepareTime(llmBig)))
			}
			if step >= 1 {
				b.use("team-d", "llm-big", "server", ramp(20*gib, 29*gib, step, 1, 10))
				b.use("team-b", "infer", "server", ramp(20*gib, 30*gib+gib/2, step, 3, 12))
				b.use("team-c", "notebook", "jupyter", 15*gib)
			}
		}},

	// team-b/infer borrows above its request on gpu-node-b's H100 and MPS
	// evicts it whenever team-d/llm-big, within its request, needs the
	// memory: at steps 4, 9, 14 and 18, four times in 15 minutes; each time
	// the client restarts and climbs back above its request.
	"repeated-evictions": {steps: 20, promises: append([]string{"gpufrac_incidents_total"}, baseFamilies...),
		script: func(w *world, step int) {
			base(w, step)
			b := w.nodes[1]
			if step == 0 {
				must(b.prepare(llmBig, prepareTime(llmBig)))
			}
			b.use("team-d", "llm-big", "server", ramp(18*gib, 29*gib, step, 0, 14))
			since := step % 5 // the client's age in steps since its restart
			b.use("team-b", "infer", "server", 20*gib+int64(since)*2*gib)
			if step == 4 || step == 9 || step == 14 || step == 18 {
				b.evict(w.ctx, w.now, "team-b", "infer", "server")
			}
		}},

	// team-b/train's trainer on gpu-node-a's second H200 climbs to its
	// 90Gi hard limit by step 4 and stays within the driver's refusal band
	// (89.4Gi, 99% of the limit with its sidecar) for 20 minutes: its next
	// allocation fails with out-of-memory.
	"at-hard-limit": {steps: 25, promises: append([]string{"gpufrac_incidents_total"}, baseFamilies...),
		script: func(w *world, step int) {
			base(w, step)
			w.nodes[0].use("team-b", "train", "trainer", ramp(40*gib, 89*gib+4*gib/10, step, 0, 4))
		}},

	// The MPS daemon of gpu-node-a's first H200, which team-a/embed
	// (SMSharing) needs, fails its health check from step 5 to step 16
	// (11 minutes), then answers again.
	"mps-daemon-not-ready": {steps: 20, promises: baseFamilies,
		script: func(w *world, step int) {
			base(w, step)
			a := w.nodes[0]
			a.daemonDown[a.inv.GPUs[0].UUID] = step >= 5 && step < 16
		}},

	// gpu-node-b's first H100 reports XID 79 (fallen off the bus) at step 6
	// and stays unhealthy: its slice taints it, and team-b/infer and
	// team-c/notebook stay prepared on it.
	"unhealthy-gpu-with-claims": {steps: 20, promises: baseFamilies,
		script: func(w *world, step int) {
			base(w, step)
			b := w.nodes[1]
			if step >= 6 {
				b.unhealthy[b.inv.GPUs[0].UUID] = "XID 79"
			}
		}},

	// From step 4 the kubelet retries team-d/llm-big's Prepare on
	// gpu-node-a every step and it fails (no MPS on the GPU it asks for),
	// and from step 10 a second claim fails as an invalid one.
	"prepare-errors": {steps: 20, promises: baseFamilies,
		script: func(w *world, step int) {
			base(w, step)
			a := w.nodes[0]
			if step >= 4 {
				a.failPrepare(fractionmetrics.ReasonNoMPS, 35*time.Millisecond)
			}
			if step >= 10 {
				a.failPrepare(fractionmetrics.ReasonInvalidClaim, 2*time.Millisecond)
			}
		}},

	// gpu-node-b's plugin was rolled back at step 3: its checkpoint holds an
	// entry the newer plugin wrote and this one cannot read, kept and
	// quarantined (nothing it may own is removed).
	"quarantined-checkpoint": {steps: 20, promises: baseFamilies,
		script: func(w *world, step int) {
			base(w, step)
			if step >= 3 {
				w.nodes[1].quarantine = 1
			}
		}},
}
