// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package extender

import (
	"maps"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

const gi = int64(1) << 30

func TestScore(t *testing.T) {
	h200 := func(used int64, fractions int) GPU { return GPU{Memory: 141 * gi, Used: used, Fractions: fractions} }
	nodes := map[string]Node{
		// gpu-0 shared with 61Gi free: a 40Gi fraction fits without opening a GPU.
		"shared-room": {"a/gpu-0": h200(80*gi, 2), "a/gpu-1": {Memory: 141 * gi}},
		// Three GPUs shared, all too full for 40Gi.
		"shared-full": {"b/gpu-0": h200(130*gi, 5), "b/gpu-1": h200(120*gi, 3), "b/gpu-2": h200(110*gi, 2), "b/gpu-3": {Memory: 141 * gi}},
		// One GPU shared, too full.
		"one-full": {"c/gpu-0": h200(120*gi, 4), "c/gpu-1": {Memory: 141 * gi}},
		// Only a whole-GPU claim: it holds no fraction, so the node counts as empty.
		"whole-only": {"d/gpu-0": {Memory: 141 * gi, Whole: true}, "d/gpu-1": {Memory: 141 * gi}},
		"empty-b":    {"e/gpu-0": {Memory: 141 * gi}},
		"empty-a":    {"f/gpu-0": {Memory: 141 * gi}},
		// A GPU with room that a whole-GPU claim also marks (inconsistent
		// state from a lagging cache): not counted as shared room.
		"whole-and-fractions": {"g/gpu-0": {Memory: 141 * gi, Used: 8 * gi, Fractions: 1, Whole: true}},
	}
	for _, tc := range []struct {
		name       string
		need       int64
		candidates []string
		want       map[string]int64
	}{
		{
			name:       "shared GPUs with room first, then nodes by GPUs in use, then the first empty node by name",
			need:       40 * gi,
			candidates: []string{"empty-b", "one-full", "shared-full", "whole-only", "shared-room", "empty-a", "unknown", "whole-and-fractions"},
			want: map[string]int64{"shared-room": 10, "shared-full": 4, "one-full": 2, "empty-a": 1,
				"empty-b": 0, "whole-only": 0, "unknown": 0, "whole-and-fractions": 0},
		},
		{
			name:       "a small fraction fits the fuller nodes' GPUs too",
			need:       8 * gi,
			candidates: []string{"shared-full", "one-full", "shared-room"},
			want:       map[string]int64{"shared-full": 10, "one-full": 10, "shared-room": 10},
		},
		{
			name:       "the designated node is the first by name among the candidates only",
			need:       16 * gi,
			candidates: []string{"whole-only", "empty-b"},
			want:       map[string]int64{"empty-b": 1, "whole-only": 0},
		},
		{
			name:       "a pod without a fraction (whole GPU) gets no preference: not drawn to shared GPUs",
			need:       0,
			candidates: []string{"shared-room", "shared-full", "empty-a"},
			want:       map[string]int64{"shared-room": 0, "shared-full": 0, "empty-a": 0},
		},
		{name: "no candidates", need: 16 * gi, want: map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Score(tc.need, tc.candidates, nodes)
			if len(got) != len(tc.candidates) {
				t.Fatalf("%d scores for %d candidates", len(got), len(tc.candidates))
			}
			scores := map[string]int64{}
			for i, h := range got {
				if h.Host != tc.candidates[i] {
					t.Errorf("score %d is for %q, want %q (the candidates' order)", i, h.Host, tc.candidates[i])
				}
				if h.Score < 0 || h.Score > extenderv1.MaxExtenderPriority {
					t.Errorf("%s: score %d outside 0..%d", h.Host, h.Score, extenderv1.MaxExtenderPriority)
				}
				scores[h.Host] = h.Score
			}
			if !maps.Equal(tc.want, scores) {
				t.Errorf("scores %v, want %v", scores, tc.want)
			}
		})
	}
}

func TestScoreCapsGPUsInUse(t *testing.T) {
	n := Node{}
	for i := range 16 {
		n[string(rune('a'+i))] = GPU{Memory: 10, Used: 10, Fractions: 1}
	}
	got := Score(5, []string{"big"}, map[string]Node{"big": n})
	if got[0].Score != scoreInUseBase+scoreInUseMax || got[0].Score >= ScoreSharedFits {
		t.Errorf("16 full shared GPUs score %d, want %d (below a shared GPU with room, %d)", got[0].Score, scoreInUseBase+scoreInUseMax, ScoreSharedFits)
	}
}
