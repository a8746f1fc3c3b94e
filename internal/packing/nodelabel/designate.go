// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodelabel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// LabelFillOrder ranks the designated nodes of a pool: "1" is filled
// first, then "2", up to DesignatedPerPool. It is on designated nodes
// only (their LabelGPUsInUse is Designated).
//
// Why more than one designated node, in a fixed order: the scheduler fills
// a node (about 40 pods of the benchmark's trace) in a fraction of a
// second, while the labels follow its allocations by the allocation's
// write in PreBind, a watch event and a patch. With one designated node, a
// burst that filled it before its label changed found no labelled node
// with room and went to random empty nodes, each opening GPUs of its own:
// measured at 64 nodes with the real scheduler, 95 to 103 GPUs against a
// lower bound of 83 in 3 of 8 runs, up to 38 nodes opened, where a
// scheduler slowed tenfold (logging at -v=10) used 86 in every run
// (docs/design/packing.md). With the next nodes ranked, the overflow of a
// full designated node goes to the next one, in order, as it would if the
// labels were current.
const LabelFillOrder = "gpufrac.dev/fill-order"

// DesignatedPerPool is how many empty nodes each pool keeps designated.
// The packing webhook's terms tell as many ranks apart
// (podterms.Terms), so a higher number here would only add ties.
const DesignatedPerPool = 4

// Labels are the packing labels a node should carry; "" is absent.
type Labels struct {
	// GPUsInUse is LabelGPUsInUse: GPUs holding fractions, Designated on
	// a designated node.
	GPUsInUse string
	// FillOrder is LabelFillOrder, on designated nodes only.
	FillOrder string
}

// LabelsInUse are the labels of a node whose GPUs hold n fractions' GPUs,
// n > 0; for n <= 0 the node carries none (unless it is designated, which
// Designate decides).
func LabelsInUse(n int) Labels {
	if n <= 0 {
		return Labels{}
	}
	return Labels{GPUsInUse: strconv.Itoa(n)}
}

// LabelsDesignated are the labels of the designated node of the given rank
// (1 is filled first).
func LabelsDesignated(rank int) Labels {
	return Labels{GPUsInUse: Designated, FillOrder: strconv.Itoa(rank)}
}

// Set is the labels as a node carries them: the ones that are not "".
func (l Labels) Set() map[string]string {
	out := map[string]string{}
	if l.GPUsInUse != "" {
		out[LabelGPUsInUse] = l.GPUsInUse
	}
	if l.FillOrder != "" {
		out[LabelFillOrder] = l.FillOrder
	}
	return out
}

// LabelsOf reads a node's packing labels.
func LabelsOf(node *v1.Node) Labels {
	return Labels{GPUsInUse: node.Labels[LabelGPUsInUse], FillOrder: node.Labels[LabelFillOrder]}
}

// Patch is the merge patch that gives node the labels want (a label set to
// "" is removed), or nil when it already has them. One patch sets both, so
// no reader sees a node counted in use and ranked as empty at once for
// longer than the loop's own lag.
func Patch(node *v1.Node, want Labels) []byte {
	change := map[string]any{}
	for key, value := range map[string]string{LabelGPUsInUse: want.GPUsInUse, LabelFillOrder: want.FillOrder} {
		have, ok := node.Labels[key]
		switch {
		case value == "" && ok:
			change[key] = nil // null removes the label
		case value != "" && have != value:
			change[key] = value
		}
	}
	if len(change) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": change}})
	return patch
}

// Designation is a node to keep designated, and its rank in its pool.
type Designation struct {
	Node *v1.Node
	Rank int
}

// Designate picks the nodes to fill next, DesignatedPerPool per pool: GPU
// nodes with the same taints form a pool (GPU pools are commonly kept
// apart by taints, and a pod that does not tolerate a pool's taints could
// not use its designated nodes). In each pool it keeps the designated
// nodes that are still schedulable, empty GPU nodes (the first by name when
// there are too many), adds the first such nodes by name without a label
// until there are enough, and ranks them by name. Keeping the designated
// ones keeps a node's rank from moving while pods are on their way to it.
// keep is in rank order within each pool; drop are the designated nodes to
// clear.
func Designate(nodes []*v1.Node, gpuNodes sets.Set[string]) (keep []Designation, drop []*v1.Node) {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b *v1.Node) int { return strings.Compare(a.Name, b.Name) })
	eligible := func(n *v1.Node) bool { return gpuNodes.Has(n.Name) && !n.Spec.Unschedulable }
	chosen := map[string][]*v1.Node{}
	var pools []string
	add := func(n *v1.Node) bool {
		p := pool(n)
		if len(chosen[p]) >= DesignatedPerPool {
			return false
		}
		if _, seen := chosen[p]; !seen {
			pools = append(pools, p)
		}
		chosen[p] = append(chosen[p], n)
		return true
	}
	for _, n := range sorted {
		if n.Labels[LabelGPUsInUse] != Designated {
			continue
		}
		if !eligible(n) || !add(n) {
			drop = append(drop, n)
		}
	}
	for _, n := range sorted {
		if _, labelled := n.Labels[LabelGPUsInUse]; !labelled && eligible(n) {
			add(n)
		}
	}
	for _, p := range pools {
		ranked := chosen[p]
		slices.SortFunc(ranked, func(a, b *v1.Node) int { return strings.Compare(a.Name, b.Name) })
		for i, n := range ranked {
			keep = append(keep, Designation{Node: n, Rank: i + 1})
		}
	}
	return keep, drop
}

// DesignationMayChange tells whether a node's update can change what
// Designate decides: it reads a node's schedulability, its taints (its
// pool), whether it is designated (and its rank), and whether it carries
// LabelGPUsInUse at all, never the count itself. A count that goes from 3
// to 4, most of the label changes while the scheduler fills a node, thus
// leaves the designation alone: measured at 1,000 nodes, designating on
// every label change was two thirds of the label loop's CPU (a list and
// sort of every node per patch; docs/design/packing.md).
func DesignationMayChange(old, updated *v1.Node) bool {
	category := func(n *v1.Node) string {
		v, ok := n.Labels[LabelGPUsInUse]
		switch {
		case !ok:
			return "none"
		case v == Designated:
			return "designated"
		default:
			return "in use"
		}
	}
	return old.Spec.Unschedulable != updated.Spec.Unschedulable ||
		pool(old) != pool(updated) ||
		category(old) != category(updated) ||
		old.Labels[LabelFillOrder] != updated.Labels[LabelFillOrder]
}

// pool is the key of a node's pool: its taints.
func pool(n *v1.Node) string {
	keys := make([]string, 0, len(n.Spec.Taints))
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// designate keeps DesignatedPerPool empty GPU nodes per pool labelled, in
// rank order, while there are such nodes.
func (l *Loop) designate(ctx context.Context) error {
	nodes, err := l.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	all, err := l.slices.List(labels.Everything())
	if err != nil {
		return err
	}
	gpuNodes := sets.New[string]()
	for _, s := range all {
		if s.Spec.Driver == v1alpha1.DriverName && s.Spec.NodeName != nil && hasFractionGPU(s) {
			gpuNodes.Insert(*s.Spec.NodeName)
		}
	}
	keep, drop := Designate(nodes, gpuNodes)
	for _, n := range drop {
		if err := l.patch(ctx, n, Labels{}); err != nil {
			return err
		}
	}
	// In rank order: a node moving up is patched before the one taking its
	// old rank, so two nodes share a rank for as short a time as possible.
	for _, d := range keep {
		if err := l.patch(ctx, d.Node, LabelsDesignated(d.Rank)); err != nil {
			return err
		}
	}
	return nil
}

func (l *Loop) patch(ctx context.Context, node *v1.Node, want Labels) error {
	patch := Patch(node, want)
	if patch == nil {
		return nil
	}
	if _, err := l.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching node %s packing labels: %w", node.Name, err)
	}
	return nil
}

// hasFractionGPU tells whether s has a device fractions are placed on: a
// node whose gpufrac devices are all MIG instances (type mig, allocated
// whole) takes no part in the fill order. A device without type (an
// older plugin's) is a GPU.
func hasFractionGPU(s *resourceapi.ResourceSlice) bool {
	for _, d := range s.Spec.Devices {
		if t, ok := d.Attributes["type"]; !ok || t.StringValue == nil || *t.StringValue == "gpu" {
			return true
		}
	}
	return false
}
