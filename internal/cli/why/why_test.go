// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/cli/why"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// reasonOn is the first reason node gives, or fails.
func reasonOn(t *testing.T, e *why.Explanation, node string) why.Reason {
	t.Helper()
	for _, n := range e.Nodes {
		if n.Node == node {
			if n.Fits || len(n.Reasons) == 0 {
				t.Fatalf("node %s: fits=%v reasons=%v, want a reason", node, n.Fits, n.Reasons)
			}
			return n.Reasons[0]
		}
	}
	t.Fatalf("no verdict for node %s in %+v", node, e.Nodes)
	return why.Reason{}
}

func wantReason(t *testing.T, e *why.Explanation, node string, code why.Code, fragments ...string) {
	t.Helper()
	r := reasonOn(t, e, node)
	if r.Code != code {
		t.Fatalf("node %s: reason %s (%s), want %s", node, r.Code, r.Message, code)
	}
	for _, f := range fragments {
		if !strings.Contains(r.Message, f) {
			t.Errorf("node %s: reason %q does not say %q", node, r.Message, f)
		}
	}
	if len(e.FitsOn) > 0 {
		t.Errorf("fits on %v, want nowhere", e.FitsOn)
	}
	if len(e.Nodes) == 1 && !strings.Contains(e.Summary, string(code)) {
		t.Errorf("summary %q does not name %s", e.Summary, code)
	}
}

func suggestion(t *testing.T, e *why.Explanation, kind string) why.Suggestion {
	t.Helper()
	for _, s := range e.Suggestions {
		if s.Kind == kind {
			return s
		}
	}
	t.Fatalf("no %s suggestion in %+v", kind, e.Suggestions)
	return why.Suggestion{}
}

func TestWhy(t *testing.T) {
	dmem, mps := domain.EnforcementDMem, domain.EnforcementMPS
	tests := []struct {
		name  string
		setup func(c *cluster) why.Target
		check func(t *testing.T, c *cluster, e *why.Explanation)
	}{{
		name: "not enough free guaranteed memory on any GPU, with the smallest request and the pod to move",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x2", dmem, nil)
			c.holding("a", "n1", "gpu-0", gi(100), "pa")
			c.holding("b", "n1", "gpu-1", gi(120), "pb")
			claim := claimOf("big", "gpufrac.dev", "80Gi", "")
			return why.Target{Pod: pendingPod("p", "big"), Claims: []*resourceapi.ResourceClaim{claim}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			free0 := c.capacity("n1", "gpu-0") - gi(100)
			wantReason(t, e, "n1", why.NotEnoughMemory, "needs 80Gi", "largest free share here is "+q(free0)+" (gpu-0)")
			s := suggestion(t, e, "SmallerRequest")
			if s.RequestBytes != free0 || s.Device != "gpu-0" || s.Node != "n1" {
				t.Errorf("smaller request %+v, want %s on n1 gpu-0", s, q(free0))
			}
			l := suggestion(t, e, "AfterPodsLeave")
			if l.Device != "gpu-0" || len(l.Pods) != 1 || l.Pods[0] != "ns/pa" {
				t.Errorf("after leaving %+v, want gpu-0 once ns/pa leaves (fewest freed)", l)
			}
		},
	}, {
		name: "a whole-GPU claim (no memory named) on a GPU with any share taken",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x1", dmem, nil)
			c.holding("a", "n1", "gpu-0", gi(10), "pa")
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("whole", "gpufrac.dev", "", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			capacity := c.capacity("n1", "gpu-0")
			wantReason(t, e, "n1", why.NotEnoughMemory, "needs "+q(capacity))
			if s := suggestion(t, e, "SmallerRequest"); s.RequestBytes != capacity-gi(10) {
				t.Errorf("smaller request %s, want %s", q(s.RequestBytes), q(capacity-gi(10)))
			}
			if l := suggestion(t, e, "AfterPodsLeave"); len(l.Pods) != 1 || l.Pods[0] != "ns/pa" {
				t.Errorf("after leaving %+v, want ns/pa", l)
			}
		},
	}, {
		name: "larger than any GPU",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h100x2", dmem, nil)
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("huge", "gpufrac.dev", "100Gi", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "n1", why.NotEnoughMemory, "more than any GPU here has ("+q(c.capacity("n1", "gpu-0"))+")")
			for _, s := range e.Suggestions {
				if s.Kind == "AfterPodsLeave" {
					t.Errorf("no GPU can ever fit it, yet %+v", s)
				}
			}
		},
	}, {
		name: "fragmented: enough in total, not on one GPU",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x2", dmem, nil)
			c.holding("a", "n1", "gpu-0", gi(100), "pa")
			c.holding("b", "n1", "gpu-1", gi(100), "pb")
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("mid", "gpufrac.dev", "60Gi", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			free := c.capacity("n1", "gpu-0") - gi(100)
			wantReason(t, e, "n1", why.Fragmented, q(2*free)+" free in total across 2 GPUs", "at most "+q(free))
		},
	}, {
		name: "the DeviceClass selector excludes every GPU",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x2", dmem, nil)
			c.class("h100-only", `device.attributes["gpufrac.dev"].productName.contains("H100")`)
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("x", "h100-only", "10Gi", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "n1", why.SelectorExcludes, `DeviceClass h100-only selector "device.attributes[\"gpufrac.dev\"].productName.contains(\"H100\")"`)
			if len(e.Suggestions) != 0 {
				t.Errorf("memory suggestions for a selector problem: %+v", e.Suggestions)
			}
		},
	}, {
		name: "the claim's own CEL selector excludes every GPU",
		setup: func(c *cluster) why.Target {
			c.node("old", "h200x1", mps, nil)
			claim := claimOf("x", "gpufrac.dev", "10Gi", "")
			claim.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: `device.attributes["gpufrac.dev"].memoryEnforcement == "dmem"`}}}
			return why.Target{Claims: []*resourceapi.ResourceClaim{claim}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "old", why.SelectorExcludes, `request gpu selector`, `memoryEnforcement == \"dmem\"`)
		},
	}, {
		name: "a device taint on the only GPU",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x1", dmem, map[int]string{0: "XID 79"})
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("x", "gpufrac.dev", "10Gi", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "n1", why.Tainted, "gpu-0 (gpufrac.dev/unhealthy=XID-79:NoSchedule)")
		},
	}, {
		name: "a tolerated taint does not keep it out",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x1", dmem, map[int]string{0: "XID 79"})
			claim := claimOf("x", "gpufrac.dev", "10Gi", "")
			claim.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: "gpufrac.dev/unhealthy", Operator: resourceapi.DeviceTolerationOpExists}}
			return why.Target{Claims: []*resourceapi.ResourceClaim{claim}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			if len(e.FitsOn) != 1 || e.FitsOn[0] != "n1" {
				t.Errorf("fits on %v, want n1; nodes %+v", e.FitsOn, e.Nodes)
			}
		},
	}, {
		name: "an older-driver node cannot enforce the limit: the allocator places it, the plugin would refuse",
		setup: func(c *cluster) why.Target {
			c.node("old", "h200x1", mps, nil)
			c.node("new", "h200x1", dmem, nil)
			c.holding("a", "new", "gpu-0", gi(120), "pa")
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("burst", "gpufrac.dev", "40Gi", "60Gi")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "old", why.NodeRefuses, "the node's plugin refuses to prepare it", "memoryEnforcement mps")
			wantReason(t, e, "new", why.NotEnoughMemory)
			// A request that fits on the new node now.
			if s := suggestion(t, e, "SmallerRequest"); s.Node != "new" {
				t.Errorf("smaller request on %s, want new (old refuses any limit above the request)", s.Node)
			}
		},
	}, {
		name: "fits now on the node that can enforce it",
		setup: func(c *cluster) why.Target {
			c.node("old", "h200x1", mps, nil)
			c.node("new", "h200x1", dmem, nil)
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("burst", "gpufrac.dev", "40Gi", "60Gi")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			if len(e.FitsOn) != 1 || e.FitsOn[0] != "new" {
				t.Errorf("fits on %v, want [new]", e.FitsOn)
			}
			reasonOn(t, e, "old")
			if !strings.Contains(e.Summary, "fit now on [new]") {
				t.Errorf("summary %q", e.Summary)
			}
		},
	}, {
		name: "each request fits alone, not both together",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x1", dmem, nil)
			claim := claimOf("two", "gpufrac.dev", "100Gi", "")
			second := claim.Spec.Devices.Requests[0].DeepCopy()
			second.Name = "second"
			claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, *second)
			return why.Target{Claims: []*resourceapi.ResourceClaim{claim}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "n1", why.Combination, "each request fits here alone")
		},
	}, {
		name: "the pod's node selector rules a node out",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x1", dmem, nil)
			c.node("n2", "h200x1", dmem, nil)
			c.holding("a", "n2", "gpu-0", gi(130), "pa")
			for _, n := range []string{"n1", "n2"} {
				c.snap.Nodes = append(c.snap.Nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}})
			}
			pod := pendingPod("p", "x")
			pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "n2"}
			return why.Target{Pod: pod, Claims: []*resourceapi.ResourceClaim{claimOf("x", "gpufrac.dev", "40Gi", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			if r := reasonOn(t, e, "n1"); r.Code != why.NodeExcluded {
				t.Errorf("n1: %+v, want NodeExcluded", r)
			}
			wantReason(t, e, "n2", why.NotEnoughMemory)
		},
	}, {
		name: "a node that publishes no GPUs",
		setup: func(c *cluster) why.Target {
			c.snap.Slices = append(c.snap.Slices, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "empty"},
				Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To("empty"), Pool: resourceapi.ResourcePool{Name: "empty", ResourceSliceCount: 1}}})
			return why.Target{Claims: []*resourceapi.ResourceClaim{claimOf("x", "gpufrac.dev", "10Gi", "")}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			wantReason(t, e, "empty", why.NoGPUs)
		},
	}, {
		name: "a running pod: where each share is, request, limit, enforcement, mode, MPS route, usage",
		setup: func(c *cluster) why.Target {
			c.node("n1", "h200x1", dmem, nil)
			claim := c.holding("run", "n1", "gpu-0", gi(40), "p")
			uuid := c.snap.Slices[0].Spec.Devices[0].Attributes["uuid"].StringValue
			prepared(c.t, claim, domain.DeviceData{UUID: *uuid, MemoryRequest: "40Gi", MemoryLimit: "60Gi",
				ComputeMode: "SMSharing", Enforcement: "dmem", MPSServer: "/run/gpufrac/mps/gx/pipe/gpufrac/cabc"})
			c.snap.Usage = []why.ContainerUsage{{Namespace: "ns", Pod: "p", Container: "app", ClaimUID: string(claim.UID), GPUUUID: *uuid, UsedBytes: gi(50)}}
			pod := pendingPod("p", "run")
			pod.Status.Phase, pod.Spec.NodeName = v1.PodRunning, "n1"
			return why.Target{Pod: pod, Claims: []*resourceapi.ResourceClaim{claim}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			if len(e.Shares) != 1 {
				t.Fatalf("shares %+v, want 1", e.Shares)
			}
			s := e.Shares[0]
			if s.Node != "n1" || s.Device != "gpu-0" || s.RequestBytes != gi(40) || s.LimitBytes != gi(60) || s.ComputeMode != "SMSharing" ||
				s.Enforcement != "dmem" || s.MPSServer == "" || !s.Prepared || len(s.Usage) != 1 || s.Usage[0].UsedBytes != gi(50) || len(s.Conditions) != 1 {
				t.Errorf("share %+v", s)
			}
			if e.Summary != "the claims are allocated and prepared" || len(e.Nodes) != 0 {
				t.Errorf("summary %q, nodes %+v", e.Summary, e.Nodes)
			}
		},
	}, {
		name: "scheduled on a node that refuses the claim: the plugin's reason",
		setup: func(c *cluster) why.Target {
			c.node("old", "h200x1", mps, nil)
			claim := c.holding("burst", "old", "gpu-0", gi(40), "p")
			spec := claimOf("burst", "gpufrac.dev", "40Gi", "60Gi")
			claim.Spec = spec.Spec
			claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
				Requests: []string{"gpu"}, DeviceConfiguration: spec.Spec.Devices.Config[0].DeviceConfiguration}}
			pod := pendingPod("p", "burst")
			pod.Spec.NodeName = "old"
			return why.Target{Pod: pod, Claims: []*resourceapi.ResourceClaim{claim}}
		},
		check: func(t *testing.T, c *cluster, e *why.Explanation) {
			if len(e.Problems) != 1 || e.Problems[0].Code != why.NodeRefuses || !strings.Contains(e.Problems[0].Message, "memoryLimit") {
				t.Fatalf("problems %+v, want the plugin's refusal of memoryLimit", e.Problems)
			}
			if !strings.Contains(e.Summary, "refuses to prepare") {
				t.Errorf("summary %q", e.Summary)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			target := tc.setup(c)
			e, err := why.Explain(context.Background(), c.snap, target)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c, e)
			if t.Failed() {
				out, _ := json.MarshalIndent(e, "", "  ")
				t.Logf("explanation:\n%s", out)
			}
		})
	}
}
