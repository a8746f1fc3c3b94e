// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/internal/cli/why"
	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestWhyBlockedByFragmentationOrCapacity: a Pending pod is blocked by
// fragmentation when the GPUs it may use have its request free in all but
// not on one GPU, by capacity when not even in all; GPUs its selectors or
// taints rule out do not count.
func TestWhyBlockedByFragmentationOrCapacity(t *testing.T) {
	dmem := domain.EnforcementDMem
	// Two one-GPU H100 nodes with 60Gi held on each: about 19Gi free
	// apiece (the published capacity is a little under 80Gi).
	twoNodes := func(c *cluster) {
		c.node("n1", "h100x1", dmem, nil)
		c.node("n2", "h100x1", dmem, nil)
		c.holding("a", "n1", "gpu-0", gi(60), "pa")
		c.holding("b", "n2", "gpu-0", gi(60), "pb")
	}
	for _, tc := range []struct {
		name    string
		setup   func(c *cluster)
		request string
		want    fragmentation.Cause
		says    string
	}{
		{"fits nowhere alone, fits in the pool's free memory", twoNodes, "30Gi", fragmentation.ByFragmentation, "blocked by fragmentation, not capacity"},
		{"more than the pool's free memory", twoNodes, "50Gi", fragmentation.ByCapacity, "blocked by capacity"},
		{"fits on a GPU: not blocked", twoNodes, "10Gi", fragmentation.Fits, ""},
		{"a tainted GPU's free memory does not count", func(c *cluster) {
			c.node("n1", "h100x1", dmem, nil)
			c.node("n2", "h100x1", dmem, map[int]string{0: "XID-79"})
			c.holding("a", "n1", "gpu-0", gi(60), "pa")
			c.holding("b", "n2", "gpu-0", gi(60), "pb")
		}, "30Gi", fragmentation.ByCapacity, "blocked by capacity"},
		{"fragmented inside one node", func(c *cluster) {
			c.node("n1", "h100x2", dmem, nil)
			c.holding("a", "n1", "gpu-0", gi(60), "pa")
			c.holding("b", "n1", "gpu-1", gi(60), "pb")
		}, "30Gi", fragmentation.ByFragmentation, "the 2 GPUs it may use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			tc.setup(c)
			target := why.Target{Pod: pendingPod("p", "c"), Claims: []*resourceapi.ResourceClaim{claimOf("c", "gpufrac.dev", tc.request, "")}}
			e, err := why.Explain(context.Background(), c.snap, target)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == fragmentation.Fits {
				if e.Blocked != nil || len(e.FitsOn) == 0 {
					t.Errorf("blocked %+v, fits on %v; want it to fit and no verdict", e.Blocked, e.FitsOn)
				}
				return
			}
			if e.Blocked == nil || e.Blocked.Cause != tc.want {
				t.Fatalf("blocked %+v, want cause %q", e.Blocked, tc.want)
			}
			if !strings.Contains(e.Summary, tc.says) || !strings.Contains(e.Blocked.Message, tc.says) {
				t.Errorf("summary %q / message %q does not say %q", e.Summary, e.Blocked.Message, tc.says)
			}
			if e.Blocked.NeedBytes != gi(30) && tc.request == "30Gi" {
				t.Errorf("need %s, want 30Gi", q(e.Blocked.NeedBytes))
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		free        []int64
		need, count int64
		want        fragmentation.Cause
	}{
		{[]int64{gi(20), gi(20)}, gi(30), 1, fragmentation.ByFragmentation},
		{[]int64{gi(20), gi(20)}, gi(50), 1, fragmentation.ByCapacity},
		{[]int64{gi(20), gi(40)}, gi(30), 1, fragmentation.Fits},
		{[]int64{gi(40), gi(20), gi(20)}, gi(30), 2, fragmentation.ByFragmentation},
		{[]int64{gi(40), gi(20)}, gi(30), 2, fragmentation.ByFragmentation},
		{[]int64{gi(40), gi(10)}, gi(30), 2, fragmentation.ByCapacity},
		{[]int64{-gi(5), gi(20)}, gi(20), 2, fragmentation.ByCapacity}, // an over-full GPU adds nothing
		{nil, gi(1), 1, fragmentation.ByCapacity},
	} {
		if got := fragmentation.Verdict(tc.free, nil, tc.need, tc.count); got != tc.want {
			t.Errorf("Verdict(%v, %s x%d) = %q, want %q", tc.free, q(tc.need), tc.count, got, tc.want)
		}
	}
	// make demo's too-large pod: 200Gi on GPUs of 141Gi with plenty free in
	// all is capacity, not fragmentation: no move makes room for it.
	caps := []int64{gi(141), gi(141)}
	if got := fragmentation.Verdict([]int64{gi(120), gi(100)}, caps, gi(200), 1); got != fragmentation.ByCapacity {
		t.Errorf("Verdict(200Gi on 141Gi GPUs) = %q, want %q", got, fragmentation.ByCapacity)
	}
	if got := fragmentation.Verdict([]int64{gi(60), gi(60)}, caps, gi(100), 1); got != fragmentation.ByFragmentation {
		t.Errorf("Verdict(100Gi, 60Gi free on each of two 141Gi GPUs) = %q, want %q", got, fragmentation.ByFragmentation)
	}
}
