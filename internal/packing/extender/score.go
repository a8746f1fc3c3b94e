// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package extender serves kube-scheduler's extender prioritize verb
// (k8s.io/kube-scheduler/extender/v1) from gpufrac-controller's claim and
// slice informers: a fraction pod's feasible nodes are ranked GPUs already
// shared first, then nodes holding fractions, then one designated empty
// node. It is an opt-in alternative to the node label the chart ships
// (internal/packing/nodelabel); docs/design/packing.md has the measurements
// that chose between them.
//
// A scheduler extender is configured in the scheduler's
// KubeSchedulerConfiguration (extenders[], documented:
// https://kubernetes.io/docs/reference/config-api/kube-scheduler-config.v1/#kubescheduler-config-k8s-io-v1-Extender),
// which managed clusters do not expose for the default scheduler; it is
// meant to be marked ignorable with a short httpTimeout, so that a dead
// controller costs packing, never scheduling.
package extender

import (
	"slices"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Levels of the score, out of extenderv1.MaxExtenderPriority (10). The
// scheduler multiplies an extender's score by its weight and by
// MaxNodeScore / MaxExtenderPriority (10) and adds it to the plugins'
// weighted scores (source: k8s.io/kubernetes@v1.37.2
// pkg/scheduler/schedule_one.go, prioritizeNodes).
const (
	// ScoreSharedFits: a GPU of the node already holds fractions and has
	// the memory the pod asks for free, so placing it there opens no GPU.
	ScoreSharedFits int64 = extenderv1.MaxExtenderPriority
	// scoreInUseBase + GPUs holding fractions (at most scoreInUseMax):
	// the node holds fractions but none of its shared GPUs has room.
	scoreInUseBase int64 = 1
	scoreInUseMax  int64 = 8
	// ScoreDesignated: the first node by name among the candidates whose
	// GPUs hold no fraction, so that the pods of a burst, scored before
	// any of their allocations is seen, all prefer the same empty node
	// (the node label's designated node, internal/packing/nodelabel, for the
	// same reason).
	ScoreDesignated int64 = 1
)

// GPU is what the score reads of one device.
type GPU struct {
	// Memory is the device's memory capacity in bytes.
	Memory int64
	// Used is the memory the fraction claims allocated on it consume.
	Used int64
	// Fractions counts the fraction claims allocated on it.
	Fractions int
	// Whole: a whole-GPU claim holds it, so nothing else fits.
	Whole bool
}

// Node is a node's GPUs, by pool/device.
type Node map[string]GPU

// Score ranks candidates for a pod whose largest fraction request asks
// need bytes. A pod that asks no fraction (need <= 0: whole-GPU pods and
// pods without gpufrac claims) gets no preference at all, so whole GPUs are
// not drawn to shared ones (the allocator never puts them on a shared GPU
// either: a request without a memory request takes the whole device).
// Candidates missing from nodes hold nothing.
func Score(need int64, candidates []string, nodes map[string]Node) extenderv1.HostPriorityList {
	out := make(extenderv1.HostPriorityList, len(candidates))
	designated := ""
	for i, name := range candidates {
		out[i].Host = name
		if need <= 0 {
			continue
		}
		n := nodes[name]
		inUse := int64(0)
		fits := false
		for _, g := range n {
			if g.Fractions == 0 || g.Whole {
				continue
			}
			inUse++
			if g.Memory-g.Used >= need {
				fits = true
			}
		}
		switch {
		case fits:
			out[i].Score = ScoreSharedFits
		case inUse > 0:
			out[i].Score = scoreInUseBase + min(inUse, scoreInUseMax)
		case designated == "" || name < designated:
			designated = name
		}
	}
	if designated != "" {
		i := slices.IndexFunc(out, func(h extenderv1.HostPriority) bool { return h.Host == designated })
		out[i].Score = ScoreDesignated
	}
	return out
}
