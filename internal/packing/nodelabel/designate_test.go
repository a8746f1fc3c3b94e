// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodelabel_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
)

func TestPatch(t *testing.T) {
	node := func(labels map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	}
	designated := map[string]string{nodelabel.LabelGPUsInUse: "0", nodelabel.LabelFillOrder: "2"}
	for _, tc := range []struct {
		name string
		node *v1.Node
		want nodelabel.Labels
		out  string
	}{
		{name: "set", node: node(nil), want: nodelabel.LabelsInUse(2), out: `{"metadata":{"labels":{"gpufrac.dev/gpus-in-use":"2"}}}`},
		{name: "unchanged", node: node(map[string]string{nodelabel.LabelGPUsInUse: "2"}), want: nodelabel.LabelsInUse(2)},
		{name: "remove", node: node(map[string]string{nodelabel.LabelGPUsInUse: "2"}), want: nodelabel.LabelsInUse(0), out: `{"metadata":{"labels":{"gpufrac.dev/gpus-in-use":null}}}`},
		{name: "nothing to remove", node: node(map[string]string{"other": "x"}), want: nodelabel.Labels{}},
		{name: "designate", node: node(nil), want: nodelabel.LabelsDesignated(3),
			out: `{"metadata":{"labels":{"gpufrac.dev/fill-order":"3","gpufrac.dev/gpus-in-use":"0"}}}`},
		{name: "move up a rank", node: node(designated), want: nodelabel.LabelsDesignated(1), out: `{"metadata":{"labels":{"gpufrac.dev/fill-order":"1"}}}`},
		{name: "a designated node takes its first claim: one patch, rank gone", node: node(designated), want: nodelabel.LabelsInUse(1),
			out: `{"metadata":{"labels":{"gpufrac.dev/fill-order":null,"gpufrac.dev/gpus-in-use":"1"}}}`},
		{name: "undesignate", node: node(designated), want: nodelabel.Labels{},
			out: `{"metadata":{"labels":{"gpufrac.dev/fill-order":null,"gpufrac.dev/gpus-in-use":null}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(nodelabel.Patch(tc.node, tc.want)); got != tc.out {
				t.Errorf("Patch = %s, want %s", got, tc.out)
			}
		})
	}
}

func TestDesignate(t *testing.T) {
	node := func(name, label string, cordoned bool) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{Unschedulable: cordoned}}
		if label != "" {
			n.Labels = map[string]string{nodelabel.LabelGPUsInUse: label}
		}
		return n
	}
	gpus := sets.New("a", "b", "c", "d", "e", "f", "g")
	tainted := node("c", "", false)
	tainted.Spec.Taints = []v1.Taint{{Key: "pool", Value: "b", Effect: v1.TaintEffectNoSchedule}}
	d := nodelabel.Designated
	for _, tc := range []struct {
		name  string
		nodes []*v1.Node
		keep  []string // name:rank, in order
		drop  []string
	}{
		{name: "first empty GPU nodes by name, ranked", nodes: []*v1.Node{node("x", "", false), node("g", "", false), node("c", "", false),
			node("b", "", false), node("f", "", false), node("e", "", false)},
			keep: []string{"b:1", "c:2", "e:3", "f:4"}},
		{name: "skips nodes in use and cordoned ones", nodes: []*v1.Node{node("a", "3", false), node("b", "", true), node("c", "", false)}, keep: []string{"c:1"}},
		{name: "keeps the designated ones, ranks by name with the new", nodes: []*v1.Node{node("a", "", false), node("c", d, false), node("e", d, false)},
			keep: []string{"a:1", "c:2", "e:3"}},
		{name: "a designated node keeps its place over an empty node before it", nodes: []*v1.Node{node("a", "", false), node("b", d, false),
			node("c", d, false), node("d", d, false), node("e", d, false)}, keep: []string{"b:1", "c:2", "d:3", "e:4"}},
		{name: "the first takes a claim: the rest move up, the next joins last", nodes: []*v1.Node{node("a", "8", false), node("b", "1", false),
			node("c", d, false), node("d", d, false), node("e", d, false), node("f", "", false), node("g", "", false)},
			keep: []string{"c:1", "d:2", "e:3", "f:4"}},
		{name: "drops extra and cordoned designations", nodes: []*v1.Node{node("a", d, true), node("b", d, false), node("c", d, false),
			node("d", d, false), node("e", d, false), node("f", d, false)}, keep: []string{"b:1", "c:2", "d:3", "e:4"}, drop: []string{"a", "f"}},
		{name: "a node without GPUs is never designated", nodes: []*v1.Node{node("x", d, false), node("a", "", false)}, keep: []string{"a:1"}, drop: []string{"x"}},
		{name: "per pool of taints", nodes: []*v1.Node{node("a", "1", false), node("b", "", false), tainted, node("d", "", false)},
			keep: []string{"b:1", "d:2", "c:1"}},
		{name: "no GPU node left", nodes: []*v1.Node{node("a", "8", false), node("x", "", false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, drop := nodelabel.Designate(tc.nodes, gpus)
			var gotKeep, gotDrop []string
			for _, k := range keep {
				gotKeep = append(gotKeep, fmt.Sprintf("%s:%d", k.Node.Name, k.Rank))
			}
			for _, n := range drop {
				gotDrop = append(gotDrop, n.Name)
			}
			if fmt.Sprint(gotKeep) != fmt.Sprint(tc.keep) || !sets.New(gotDrop...).Equal(sets.New(tc.drop...)) {
				t.Errorf("Designate = %v, drop %v; want %v, drop %v", gotKeep, gotDrop, tc.keep, tc.drop)
			}
		})
	}
}

func TestDesignationMayChange(t *testing.T) {
	node := func(labels map[string]string, mutate ...func(*v1.Node)) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
		for _, m := range mutate {
			m(n)
		}
		return n
	}
	inUse := func(n string) map[string]string { return map[string]string{nodelabel.LabelGPUsInUse: n} }
	designated := func(rank string) map[string]string {
		return map[string]string{nodelabel.LabelGPUsInUse: nodelabel.Designated, nodelabel.LabelFillOrder: rank}
	}
	cordon := func(n *v1.Node) { n.Spec.Unschedulable = true }
	taint := func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{{Key: "pool", Value: "b", Effect: v1.TaintEffectNoSchedule}}
	}
	other := func(n *v1.Node) { n.Labels["zone"] = "b" }
	for _, tc := range []struct {
		name     string
		old, new *v1.Node
		want     bool
	}{
		{name: "count grows", old: node(inUse("3")), new: node(inUse("4"))},
		{name: "count shrinks", old: node(inUse("4")), new: node(inUse("1"))},
		{name: "another label", old: node(inUse("4")), new: node(inUse("4"), other)},
		{name: "designated takes a claim", old: node(designated("1")), new: node(inUse("1")), want: true},
		{name: "first claim on an unlabelled node", old: node(nil), new: node(inUse("1")), want: true},
		{name: "last claim gone", old: node(inUse("1")), new: node(nil), want: true},
		{name: "rank moves", old: node(designated("2")), new: node(designated("1")), want: true},
		{name: "cordoned", old: node(nil), new: node(nil, cordon), want: true},
		{name: "tainted into another pool", old: node(nil), new: node(nil, taint), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodelabel.DesignationMayChange(tc.old, tc.new); got != tc.want {
				t.Errorf("DesignationMayChange = %v, want %v", got, tc.want)
			}
			if tc.want {
				return
			}
			// What it calls unchanged must be: Designate decides the same
			// with either version of the node among others.
			others := []*v1.Node{
				{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
				{ObjectMeta: metav1.ObjectMeta{Name: "m", Labels: designated("1")}},
				{ObjectMeta: metav1.ObjectMeta{Name: "z"}},
			}
			gpus := sets.New("a", "m", "n", "z")
			decide := func(n *v1.Node) string {
				keep, drop := nodelabel.Designate(append([]*v1.Node{n}, others...), gpus)
				var out []string
				for _, k := range keep {
					out = append(out, fmt.Sprintf("%s:%d", k.Node.Name, k.Rank))
				}
				for _, d := range drop {
					out = append(out, "drop "+d.Name)
				}
				return fmt.Sprint(out)
			}
			if before, after := decide(tc.old), decide(tc.new); before != after {
				t.Errorf("Designate changed from %s to %s", before, after)
			}
		})
	}
}
