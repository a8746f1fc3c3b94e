// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"slices"
	"strings"
	"testing"
)

// What Acquire does with a running node server whose GPU set differs from
// the set a server started now would serve: nothing when they agree (or
// nothing runs), a restart when no claim holds it, and otherwise the old
// server keeps its claims, serving new claims on its own GPUs and refusing
// those on a GPU it was not started with.
func TestDecideServerSet(t *testing.T) {
	ab, abc, a := []string{"GPU-a", "GPU-b"}, []string{"GPU-a", "GPU-b", "GPU-c"}, []string{"GPU-a"}
	for _, tc := range []struct {
		name                   string
		running, wanted, asked []string
		held                   bool
		want                   serverSetAction
		outside                []string
	}{
		{name: "no server runs", running: nil, wanted: abc, asked: []string{"GPU-c"}, held: true, want: serverSetSame},
		{name: "same set", running: ab, wanted: ab, asked: ab, held: true, want: serverSetSame},
		{name: "same set in another order", running: []string{"GPU-b", "GPU-a"}, wanted: ab, asked: a, held: false, want: serverSetSame},
		{name: "GPU added, unheld", running: ab, wanted: abc, asked: []string{"GPU-c"}, held: false, want: serverSetRestart},
		{name: "GPU removed, unheld", running: abc, wanted: ab, asked: a, held: false, want: serverSetRestart},
		{name: "GPU added, held, claim on an old GPU", running: ab, wanted: abc, asked: ab, held: true, want: serverSetServe},
		{name: "GPU added, held, claim on the new GPU", running: ab, wanted: abc, asked: []string{"GPU-a", "GPU-c"}, held: true, want: serverSetRefuse, outside: []string{"GPU-c"}},
		{name: "GPU removed, held", running: abc, wanted: ab, asked: ab, held: true, want: serverSetServe},
		{name: "GPU swapped, held, claim on the new GPU", running: ab, wanted: []string{"GPU-a", "GPU-d"}, asked: []string{"GPU-d", "GPU-d"}, held: true, want: serverSetRefuse, outside: []string{"GPU-d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, outside := decideServerSet(tc.running, tc.wanted, tc.asked, tc.held)
			if got != tc.want || !slices.Equal(outside, tc.outside) {
				t.Errorf("decideServerSet(%v, %v, %v, held %v) = %v %v, want %v %v", tc.running, tc.wanted, tc.asked, tc.held, got, outside, tc.want, tc.outside)
			}
		})
	}
}

// The refusal names the field, the server's set, the node's set now, the
// GPU asked for and who holds the server.
func TestServerGPUsErrorSaysWhy(t *testing.T) {
	err := &ServerGPUsError{Running: []string{"GPU-a"}, Wanted: []string{"GPU-a", "GPU-b"}, Outside: []string{"GPU-b"}, Holders: []string{"ns/held"}}
	for _, want := range []string{"allowed_devices: ", "[GPU-a]", "[GPU-a,GPU-b]", "GPU GPU-b", "1 claims that use it (ns/held)", "once they are unprepared"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err.Error(), want)
		}
	}
	added, removed := setDiff([]string{"GPU-a", "GPU-b"}, []string{"GPU-b", "GPU-c"})
	if !slices.Equal(added, []string{"GPU-c"}) || !slices.Equal(removed, []string{"GPU-a"}) {
		t.Errorf("setDiff: added %v removed %v", added, removed)
	}
}
