// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package simulate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpufrac/gpufrac/internal/core/allocator"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

// Scheduler is how pods pick nodes. The zero value is kube-scheduler's
// default profile as it treats DRA pods (v1.37, no DRA node scoring):
//
//   - Filter: nodes are tried from a start index that rotates by the nodes
//     tried for the previous pod, until percentageOfNodesToScore of them
//     (adaptive: 50% - nodes/125, at least 5% and 100 nodes) fit;
//   - Score: NodeResourcesFit's least-allocated score over CPU and memory
//     with the scheduler's non-zero defaults for pods without requests
//     (100m, 200MB), which favours emptier nodes; with Packing, plus
//     NodeAffinity (weight 2) for the preferred node affinity gpufrac's
//     webhook gives fraction pods (one term per GPU in use on the node, as
//     gpufrac-controller labels it), normalised over the scored nodes to
//     0-100; other default plugins score every node alike for these pods;
//   - ties go to a random node (seeded by Seed), as selectHost does.
//
// Inside the chosen node the allocator takes GPUs first fit in slice order,
// as the scheduler's does.
type Scheduler struct {
	// FirstFit places each pod on the first node, in order, where it fits:
	// the simulator's original model, a scheduler that does not exist.
	FirstFit bool
	// Packing models gpufrac's packing webhook (chart value
	// controller.packing.enabled).
	Packing bool
	Seed    uint64
	// PercentageOfNodesToScore as KubeSchedulerConfiguration sets it; 0 is
	// the adaptive default.
	PercentageOfNodesToScore int
	// Node allocatable for scoring; zero values are those of the test
	// harness's nodes (64 CPUs, 512Gi, 110 pods).
	NodeMilliCPU, NodeMemory int64
	MaxPods                  int
}

// The scheduler's defaults (pkg/scheduler/util and schedule_one.go, v1.37).
const (
	defaultMilliCPURequest   = 100
	defaultMemoryRequest     = 200 << 20
	minFeasibleNodesToFind   = 100
	minFeasiblePercentToFind = 5
)

// numFeasibleNodesToFind is schedule_one.go's.
func (s Scheduler) numFeasibleNodesToFind(nodes int) int {
	if nodes < minFeasibleNodesToFind {
		return nodes
	}
	pct := s.PercentageOfNodesToScore
	if pct == 0 {
		pct = max(50-nodes/125, minFeasiblePercentToFind)
	}
	return max(nodes*pct/100, minFeasibleNodesToFind)
}

// schedState is what the model tracks between pods.
type schedState struct {
	s     Scheduler
	rng   *rand.Rand
	nodes []string
	start int
	pods  map[string]int
	// gpus are the devices in use per node.
	gpus map[string]map[string]bool
	// byName are the nodes sorted by name, the order nodelabel
	// designates them in.
	byName []string
	// terms are the packing webhook's, as the scheduler matches them;
	// scores caches their score per label state (a few dozen states).
	terms  *nodeaffinity.PreferredSchedulingTerms
	scores map[nodelabel.Labels]int
}

func newSchedState(s Scheduler, nodes []string) (*schedState, error) {
	if s.NodeMilliCPU == 0 {
		s.NodeMilliCPU = 64_000
	}
	if s.NodeMemory == 0 {
		s.NodeMemory = 512 << 30
	}
	if s.MaxPods == 0 {
		s.MaxPods = 110
	}
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(podterms.Terms())
	if err != nil {
		return nil, fmt.Errorf("the packing webhook's node-affinity terms: %w", err)
	}
	byName := slices.Clone(nodes)
	slices.Sort(byName)
	return &schedState{s: s, rng: rand.New(rand.NewPCG(s.Seed, s.Seed^0x5bd1e995)), nodes: nodes, byName: byName,
		pods: map[string]int{}, gpus: map[string]map[string]bool{}, terms: terms, scores: map[nodelabel.Labels]int{}}, nil
}

func leastRequested(requested, capacity int64) int64 {
	if requested > capacity {
		return 0
	}
	return (capacity - requested) * 100 / capacity
}

// place picks a node for one pod and records its allocation; nil when it
// fits nowhere.
func (st *schedState) place(ctx context.Context, cl *allocator.Cluster, fraction bool, claims []*resourceapi.ResourceClaim) (*allocator.Fit, error) {
	if st.s.FirstFit {
		results, node, err := cl.Allocate(ctx, claims...)
		if err != nil || results == nil {
			return nil, err
		}
		st.pods[node]++
		return &allocator.Fit{Node: node, Results: results}, nil
	}
	full := func(node string) bool { return st.pods[node] >= st.s.MaxPods }
	fits, tried, err := cl.FitsFrom(ctx, st.start, st.s.numFeasibleNodesToFind(len(st.nodes)), full, claims...)
	if err != nil {
		return nil, err
	}
	st.start = (st.start + tried) % max(len(st.nodes), 1)
	if len(fits) == 0 {
		return nil, nil
	}
	scores := make([]int64, len(fits))
	affine := st.s.Packing && fraction
	var hi int
	levels := make([]int, len(fits))
	if affine {
		designated := st.designated()
		for i, f := range fits {
			levels[i] = st.packingScore(f.Node, designated)
			hi = max(hi, levels[i])
		}
	}
	for i, f := range fits {
		n := int64(st.pods[f.Node] + 1)
		scores[i] = (leastRequested(n*defaultMilliCPURequest, st.s.NodeMilliCPU) + leastRequested(n*defaultMemoryRequest, st.s.NodeMemory)) / 2
		if affine && hi > 0 {
			// NodeAffinity (weight 2): matched terms' weights, normalised
			// by the highest over the scored nodes (DefaultNormalizeScore).
			scores[i] += 2 * int64(levels[i]*100/hi)
		}
	}
	best, ties := 0, 0
	for i := range fits {
		switch {
		case scores[i] > scores[best]:
			best, ties = i, 1
		case scores[i] == scores[best]:
			// Reservoir sampling, as selectHost does.
			ties++
			if st.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	chosen := fits[best]
	cl.Record(chosen.Results...)
	st.pods[chosen.Node]++
	// The label counts the GPUs that fraction claims hold (nodelabel).
	for _, r := range chosen.Results {
		if !fraction {
			break
		}
		for _, d := range r.Devices.Results {
			if st.gpus[chosen.Node] == nil {
				st.gpus[chosen.Node] = map[string]bool{}
			}
			st.gpus[chosen.Node][d.Pool+"/"+d.Device] = true
		}
	}
	return &chosen, nil
}

// packingScore is the sum of the weights of the packing webhook's
// node-affinity terms (podterms.Terms) that node matches, as
// kube-scheduler's NodeAffinity plugin sums them, with the labels the
// controller keeps (nodelabel): GPUs that fractions use, or the
// designated rank of an empty node. The model writes labels at once; the
// controller writes them a watch and a patch after the allocation, which
// is why it designates several nodes (nodelabel.LabelFillOrder).
func (st *schedState) packingScore(node string, designated map[string]int) int {
	var l nodelabel.Labels
	if n := len(st.gpus[node]); n > 0 {
		l = nodelabel.LabelsInUse(n)
	} else if rank, ok := designated[node]; ok {
		l = nodelabel.LabelsDesignated(rank)
	}
	score, ok := st.scores[l]
	if !ok {
		score = int(st.terms.Score(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: l.Set()}}))
		st.scores[l] = score
	}
	return score
}

// designated are the nodes nodelabel designates and their ranks: the
// first nodelabel.DesignatedPerPool by name whose GPUs hold nothing
// (the model's nodes form one pool).
func (st *schedState) designated() map[string]int {
	out := map[string]int{}
	for _, n := range st.byName {
		if len(out) == nodelabel.DesignatedPerPool {
			break
		}
		if len(st.gpus[n]) == 0 {
			out[n] = len(out) + 1
		}
	}
	return out
}

// isFraction tells whether a pod's claims ask for a share of a GPU's
// memory: the pods gpufrac's packing webhook gives the affinity to.
func isFraction(claims []resourceapi.ResourceClaimSpec) bool {
	for _, spec := range claims {
		for _, r := range spec.Devices.Requests {
			if r.Exactly != nil && r.Exactly.Capacity != nil {
				if _, ok := r.Exactly.Capacity.Requests[resourceslices.MemoryCapacity]; ok {
					return true
				}
			}
			for _, sub := range r.FirstAvailable {
				if sub.Capacity != nil {
					if _, ok := sub.Capacity.Requests[resourceslices.MemoryCapacity]; ok {
						return true
					}
				}
			}
		}
	}
	return false
}

func (s Scheduler) String() string {
	switch {
	case s.FirstFit:
		return "first fit"
	case s.Packing:
		return fmt.Sprintf("kube-scheduler with gpufrac packing (seed %d)", s.Seed)
	}
	return fmt.Sprintf("kube-scheduler (seed %d)", s.Seed)
}
