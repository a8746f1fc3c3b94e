// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// churnSample is the cluster at one moment of a churn phase: GPUs holding
// at least one share of a live pod, against the lower bound of those
// pods, ceil(memory their claims consumed / GPU memory).
type churnSample struct {
	// T is seconds since the first event (negative before it).
	T          float64 `json:"t"`
	GPUs       int     `json:"gpus"`
	LowerBound int     `json:"lowerBound"`
	// Pending pods, and those of them waiting longer than starveAfter
	// while some GPU had room for them.
	Pending int `json:"pending"`
	Starved int `json:"starved,omitempty"`
}

func (s churnSample) ratio() float64 { return ratio(s.GPUs, s.LowerBound) }

// ratioStats are the time-weighted mean, the time-weighted 95th
// percentile and the maximum of GPUs over the lower bound across samples
// taken at times T: each sample stands for the time until the next one
// (the last for the mean interval of the others). Samples with no lower
// bound (nothing placed) are left out.
func ratioStats(samples []churnSample) (mean, p95, highest float64) {
	type weighted struct{ r, w float64 }
	var ws []weighted
	var total float64
	for i, s := range samples {
		if s.LowerBound == 0 {
			continue
		}
		var w float64
		switch {
		case i+1 < len(samples):
			w = samples[i+1].T - s.T
		case len(samples) > 1:
			w = (s.T - samples[0].T) / float64(len(samples)-1)
		default:
			w = 1
		}
		if w <= 0 {
			continue
		}
		r := s.ratio()
		ws = append(ws, weighted{r, w})
		total += w
		mean += r * w
		highest = max(highest, r)
	}
	if total == 0 {
		return 0, 0, 0
	}
	mean /= total
	slices.SortFunc(ws, func(a, b weighted) int {
		switch {
		case a.r < b.r:
			return -1
		case a.r > b.r:
			return 1
		}
		return 0
	})
	var acc float64
	for _, x := range ws {
		acc += x.w
		if acc >= 0.95*total {
			return mean, x.r, highest
		}
	}
	return mean, ws[len(ws)-1].r, highest
}

// churnEvent is one replacement: at At after the first event, a random
// running pod leaves (Depart picks it among the running pods, sorted by
// name) and a pod shaped like the workload's Arrive-th arrives.
type churnEvent struct {
	At     time.Duration
	Depart uint64
	Arrive int
}

// churnEvents draws n events of a Poisson process of rate events a
// second (exponential gaps), arrivals uniformly over the workload's
// pods (the trace's own distribution of sizes), from a generator seeded
// by seed and round: both modes of a round get the same events.
func churnEvents(n int, rate float64, pods int, seed uint64, round int) []churnEvent {
	rng := rand.New(rand.NewPCG(seed, 0x63687572^uint64(round)))
	out := make([]churnEvent, n)
	var at float64
	for i := range out {
		if i > 0 {
			at += rng.ExpFloat64() / rate
		}
		out[i] = churnEvent{At: time.Duration(at * float64(time.Second)), Depart: rng.Uint64(), Arrive: rng.IntN(pods)}
	}
	return out
}

// gpuRoom is a GPU's memory and what its allocations consume.
type gpuRoom struct{ capacity, consumed int64 }

// roomFor tells whether some GPU has at least need bytes free.
func roomFor(gpus map[string]*gpuRoom, need int64) bool {
	for _, g := range gpus {
		if g.capacity-g.consumed >= need {
			return true
		}
	}
	return false
}

// percentile is the q-th quantile of xs (nearest rank), 0 for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
