// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podterms is the packing a pod carries: the label that marks a
// fraction pod, the preferred node-affinity terms over the labels
// gpufrac-controller keeps on GPU nodes (internal/packing/nodelabel), the
// JSON patch that adds them, and which pods are fraction pods. The packing
// webhook (internal/admission) and the packing MutatingAdmissionPolicy's
// parameter (internal/packing/policyparam) both apply it.
//
// Why terms: upstream kube-scheduler has no DRA scoring: among
// nodes where a pod's claims fit it picks by its other scores (with the
// default profile, least allocated CPU and memory, which spreads pods) and
// at random among equal ones, so fractions end up one per GPU across the
// cluster. Preferred node-affinity terms over the label gpufrac-controller
// keeps on GPU nodes (internal/packing/nodelabel: GPUs in use) make the NodeAffinity
// score (weight 2 in the default profile) favour the nodes whose GPUs are
// most in use; inside a node the allocator takes GPUs first fit in slice
// order, which packs GPUs. A pod affinity among fraction pods did the same
// but cost the scheduler a pass over every pod in the cluster for every pod
// (docs/design/packing.md). Nothing but the pod's own spec changes, so
// it works with the unmodified scheduler of any cluster, managed ones
// included, and it never blocks scheduling: when the controller is down
// pods are admitted without the terms (the webhook fails open), labels
// stop following, and pods only lose packing.
package podterms

import (
	"context"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/internal/deviceclass"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

const (
	// LabelFraction marks pods that hold gpufrac fractions (the webhook
	// added the packing terms).
	LabelFraction = "gpufrac.dev/fraction"
	// AnnotationPacking set to "false" on a pod keeps the webhook away
	// from it (a workload with placement rules of its own).
	AnnotationPacking = "gpufrac.dev/packing"
	// Weight is the GPUs-in-use terms' weight together: the highest
	// one term may have, so a node with every level matched outweighs the
	// spreading of least-allocated scoring (normalised, weight 2 in the
	// default profile, against 1).
	Weight = 96
	// Levels is how many levels of the GPUs-in-use label the score
	// tells apart: designated ("0", the label's presence) and 1 to
	// Levels-1 GPUs in use; a node with more scores as one with
	// Levels-1.
	Levels = 8
	// RankWeight is the weight of each term over the designated
	// nodes' rank (nodelabel.LabelFillOrder): together less than one
	// GPU-in-use level, so every node in use still comes before every
	// designated one.
	RankWeight = 3
)

// ClaimSpecs finds the specs a pod's resourceClaims refer to; ok is false
// when the object is not (yet) there.
type ClaimSpecs interface {
	TemplateSpec(ctx context.Context, namespace, name string) (spec *resourceapi.ResourceClaimSpec, ok bool)
	ClaimSpec(ctx context.Context, namespace, name string) (spec *resourceapi.ResourceClaimSpec, ok bool)
}

// Terms are the preferred node-affinity terms added to fraction
// pods, over the labels gpufrac-controller keeps:
//
//   - nodelabel.LabelGPUsInUse (GPUs in use on the node, "0" on the
//     empty nodes designated next): a node scores Weight/Levels for the
//     label's presence and as much again per GPU in use, up to Levels-1;
//   - nodelabel.LabelFillOrder (the designated nodes' rank, "1" first):
//     RankWeight per rank ahead of the last, so the first designated node
//     scores more than the second, and so on.
//
// The NodeAffinity score thus grows with the GPUs a node already shares
// and the scheduler fills the nodes that hold fractions first, fullest
// first, then the designated ones in rank order. Nodes without the labels
// (none of their GPUs shared, or the controller down) score 0 and stay
// feasible.
//
// The scores are written in binary: one term per bit of the count (In the
// values with that bit set, weighted by the bit), one Gt term for the top
// level, and the label's presence; the same for the rank. A ladder of one
// term per level (Exists, Gt 0, ..., Gt 6, then Lt 2, 3, 4) scores every
// node the same with eleven terms where these are seven, and every term
// lengthens every fraction pod the API server stores, serves and updates
// (docs/packing.md measured the cost).
func Terms() []corev1.PreferredSchedulingTerm {
	step := int32(Weight / Levels)
	terms := []corev1.PreferredSchedulingTerm{term(step, nodelabel.LabelGPUsInUse, corev1.NodeSelectorOpExists)}
	// Counts 1 to Levels-2 in binary; Levels-1 and above as one term.
	top := Levels - 2
	terms = append(terms, binaryTerms(step, nodelabel.LabelGPUsInUse, top, func(n int) int { return n })...)
	terms = append(terms, term(step*int32(Levels-1), nodelabel.LabelGPUsInUse, corev1.NodeSelectorOpGt, strconv.Itoa(top)))
	// Ranks 1 to DesignatedPerPool score DesignatedPerPool-rank steps.
	return append(terms, binaryTerms(RankWeight, nodelabel.LabelFillOrder, nodelabel.DesignatedPerPool-1,
		func(rank int) int { return nodelabel.DesignatedPerPool - rank })...)
}

// binaryTerms are the terms that add step*steps(v) to a node whose label
// key has the value v, for v from 1 to last (steps(v) >= 0): one term per
// bit of steps(v), In the values with that bit set, weighted step times
// the bit.
func binaryTerms(step int32, key string, last int, steps func(int) int) []corev1.PreferredSchedulingTerm {
	var out []corev1.PreferredSchedulingTerm
	for bit := 1; ; bit <<= 1 {
		var values []string
		more := false
		for v := 1; v <= last; v++ {
			s := steps(v)
			if s&bit != 0 {
				values = append(values, strconv.Itoa(v))
			}
			more = more || s >= bit<<1
		}
		if len(values) > 0 {
			out = append(out, term(step*int32(bit), key, corev1.NodeSelectorOpIn, values...))
		}
		if !more {
			return out
		}
	}
}

func term(weight int32, key string, op corev1.NodeSelectorOperator, values ...string) corev1.PreferredSchedulingTerm {
	return corev1.PreferredSchedulingTerm{Weight: weight, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: key, Operator: op, Values: values}}}}
}

// PatchOp is one JSON patch (RFC 6902) operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Patch returns the operations that label pod as a fraction pod and
// add the packing terms, appending to whatever affinity the pod brings
// (its own terms keep their meaning: required ones still filter, preferred
// ones still score beside ours). Operations already applied are left out,
// so a reinvoked webhook adds nothing twice.
func Patch(pod *corev1.Pod) []PatchOp {
	var ops []PatchOp
	switch {
	case pod.Labels == nil:
		ops = append(ops, PatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{LabelFraction: "true"}})
	case pod.Labels[LabelFraction] != "true":
		ops = append(ops, PatchOp{Op: "add", Path: "/metadata/labels/" + escapePointer(LabelFraction), Value: "true"})
	}
	terms := Terms()
	a := pod.Spec.Affinity
	switch {
	case a == nil:
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/affinity", Value: corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: terms}}})
	case a.NodeAffinity == nil:
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/affinity/nodeAffinity", Value: corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: terms}})
	case a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution == nil:
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
			Value: terms})
	case !hasPackingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution):
		for _, t := range terms {
			ops = append(ops, PatchOp{Op: "add", Path: "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/-", Value: t})
		}
	}
	return ops
}

func hasPackingTerms(terms []corev1.PreferredSchedulingTerm) bool {
	for _, t := range terms {
		for _, e := range t.Preference.MatchExpressions {
			if e.Key == nodelabel.LabelGPUsInUse {
				return true
			}
		}
	}
	return false
}

// RequestsFraction tells whether a claim spec asks a gpufrac class
// (gpufracClass: deviceclass.SelectsGpufrac, by name) for a share of a
// GPU's memory. A request that names no memory gets the whole GPU alone
// (the slice's requestPolicy default), so it is not a fraction and is
// never drawn towards shared GPUs.
func RequestsFraction(spec *resourceapi.ResourceClaimSpec, gpufracClass func(name string) bool) bool {
	for r := range deviceclass.GpufracRequests(spec, gpufracClass) {
		if r.Capacity == nil {
			continue
		}
		if _, ok := r.Capacity.Requests["memory"]; ok {
			return true
		}
	}
	return false
}

// IsFractionPod tells whether pod uses gpufrac fractions: a pod the KAI
// translation gave claims (its templates may not exist yet, and KAI
// portions and memory sizes always become memory requests), or one with a
// claim or template that requests a fraction.
func IsFractionPod(ctx context.Context, pod *corev1.Pod, claims ClaimSpecs, gpufracClass func(string) bool) bool {
	if pod.Annotations[kai.AnnotationTranslated] != "" {
		return true
	}
	for _, rc := range pod.Spec.ResourceClaims {
		var spec *resourceapi.ResourceClaimSpec
		var ok bool
		switch {
		case rc.ResourceClaimTemplateName != nil:
			spec, ok = claims.TemplateSpec(ctx, pod.Namespace, *rc.ResourceClaimTemplateName)
		case rc.ResourceClaimName != nil:
			spec, ok = claims.ClaimSpec(ctx, pod.Namespace, *rc.ResourceClaimName)
		}
		if ok && RequestsFraction(spec, gpufracClass) {
			return true
		}
	}
	return false
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
