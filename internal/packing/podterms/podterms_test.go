// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package podterms_test

import (
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

// TestPackingTermsRankNodes scores nodes with the packing labels through
// the node-affinity matcher kube-scheduler's NodeAffinity plugin uses
// (k8s.io/component-helpers): every node in use comes before every
// designated node, fuller before emptier; designated nodes come in rank
// order; a node without labels (or with labels the controller never
// writes) scores 0.
func TestPackingTermsRankNodes(t *testing.T) {
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(podterms.Terms())
	if err != nil {
		t.Fatal(err)
	}
	node := func(l nodelabel.Labels) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: l.Set()}}
	}
	// Best first. The label's presence is the first level, so GPUs in use
	// are told apart up to podterms.Levels-1.
	var order []nodelabel.Labels
	for n := podterms.Levels - 1; n >= 1; n-- {
		order = append(order, nodelabel.LabelsInUse(n))
	}
	for rank := 1; rank <= nodelabel.DesignatedPerPool; rank++ {
		order = append(order, nodelabel.LabelsDesignated(rank))
	}
	order = append(order, nodelabel.Labels{})
	prev := int64(-1)
	for i := len(order) - 1; i >= 0; i-- {
		s := terms.Score(node(order[i]))
		if s <= prev {
			t.Errorf("%+v scores %d, not above the next one's %d", order[i], s, prev)
		}
		prev = s
	}
	if s := terms.Score(node(nodelabel.Labels{})); s != 0 {
		t.Errorf("a node without labels scores %d, want 0", s)
	}
	if a, b := terms.Score(node(nodelabel.LabelsInUse(podterms.Levels+3))), terms.Score(node(nodelabel.LabelsInUse(podterms.Levels-1))); a != b {
		t.Errorf("more GPUs in use than the levels scores %d, want %d (the top level)", a, b)
	}
	var total int32
	for _, term := range podterms.Terms() {
		if term.Weight < 1 || term.Weight > 100 {
			t.Errorf("term weight %d outside the API's 1-100", term.Weight)
		}
		total += term.Weight
	}
	t.Logf("score range 0-%d over %d terms", total, len(podterms.Terms()))
}

// TestPackingTermsScoreAsTheLadder: the binary terms score every label
// value as the ladder of one term per level they replaced (the label's
// presence, then Gt 0 to Gt Levels-2; Lt 2 to Lt DesignatedPerPool on the
// rank): GPUs in use from 0 to well past Levels, designated ranks past
// DesignatedPerPool, and a value that is no number.
func TestPackingTermsScoreAsTheLadder(t *testing.T) {
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(podterms.Terms())
	if err != nil {
		t.Fatal(err)
	}
	step := int64(podterms.Weight / podterms.Levels)
	ladder := func(inUse, rank string) int64 {
		var s int64
		if inUse != "" {
			s += step
			if n, err := strconv.Atoi(inUse); err == nil {
				s += step * int64(min(max(n, 0), podterms.Levels-1))
			}
		}
		if r, err := strconv.Atoi(rank); err == nil {
			s += podterms.RankWeight * int64(max(nodelabel.DesignatedPerPool-r, 0))
		}
		return s
	}
	check := func(l nodelabel.Labels) {
		got := terms.Score(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: l.Set()}})
		if want := ladder(l.GPUsInUse, l.FillOrder); got != want {
			t.Errorf("labels %+v score %d, the ladder %d", l, got, want)
		}
	}
	for n := 0; n <= 3*podterms.Levels; n++ {
		check(nodelabel.Labels{GPUsInUse: strconv.Itoa(n)})
	}
	for rank := 1; rank <= 3*nodelabel.DesignatedPerPool; rank++ {
		check(nodelabel.LabelsDesignated(rank))
	}
	check(nodelabel.Labels{})
	check(nodelabel.Labels{GPUsInUse: "many"})
	if got, most := len(podterms.Terms()), podterms.Levels+nodelabel.DesignatedPerPool-1; got >= most {
		t.Errorf("%d terms, no fewer than the ladder's %d", got, most)
	}
}
