// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package incident_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestEmitter: a borrowing container becomes a Warning Event on its claim
// and on its pod, a True condition on the share's status.devices entry
// (kept when the plugin rewrites the claim's status, False when it ends)
// and one count; its end makes no Event and no count.
func TestEmitter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimObj := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team", UID: "uid-llm"}}
	client := fake.NewClientset(claimObj)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	writer := claimstatus.NewWriter(client, "gpufrac-n1", "n1")
	counter := incident.NewCounter()
	e := &incident.Emitter{Recorder: broadcaster.NewRecorder(scheme.Scheme, "gpufrac-kubelet-plugin/n1"), Conditions: writer, Counter: counter}

	// The plugin has prepared the claim: its status has the share's entry.
	uid := "s1"
	shareUID := ptr.To(uid)
	pc := &plan.Claim{UID: "uid-llm", Namespace: "team", Name: "llm", Devices: []plan.Device{{Request: "gpu", Pool: "n1", Device: "gpu-0",
		GPU: domain.GPU{UUID: "GPU-0"}, SoftLimitBytes: 40 << 30, HardLimitBytes: 60 << 30, ComputeMode: "TimeSlicing", Enforcement: "dmem"}}}
	sid := types.UID(uid)
	pc.Devices[0].ShareID = &sid
	if err := writer.Apply(ctx, "team", "llm", "uid-llm", pc); err != nil {
		t.Fatal(err)
	}

	start := incident.Incident{Kind: incident.Borrowing, Active: true, Node: "n1", Container: app, Share: share, UsedBytes: 50 << 30, Time: time.Unix(100, 0)}
	e.Emit(ctx, start)

	var got []string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events("team").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = nil
		for _, ev := range list.Items {
			got = append(got, ev.Regarding.Kind+"/"+ev.Regarding.Name+" "+ev.Type+" "+ev.Reason+" related="+ev.Related.Kind+"/"+ev.Related.Name+": "+ev.Note)
		}
		return len(got) == 2, nil
	}); err != nil {
		t.Fatalf("events %v: %v", got, err)
	}
	for _, want := range []string{"ResourceClaim/llm Warning GPUMemoryBorrowing related=Pod/llm-0", "Pod/llm-0 Warning GPUMemoryBorrowing related=ResourceClaim/llm"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("events %v lack %q", got, want)
		}
	}
	if !strings.Contains(got[0], "uses 50Gi, above its 40Gi request, on GPU GPU-0") {
		t.Errorf("event note %q", got[0])
	}

	cond := func() *metav1.Condition {
		c, err := client.ResourceV1().ResourceClaims("team").Get(ctx, "llm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Status.Devices) != 1 || ptr.Deref(c.Status.Devices[0].ShareID, "") != *shareUID {
			t.Fatalf("status.devices %+v", c.Status.Devices)
		}
		if apimeta.FindStatusCondition(c.Status.Devices[0].Conditions, claimstatus.ConditionReady) == nil {
			t.Errorf("the Ready condition was lost: %+v", c.Status.Devices[0].Conditions)
		}
		return apimeta.FindStatusCondition(c.Status.Devices[0].Conditions, string(incident.Borrowing))
	}
	if c := cond(); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "above its 40Gi request") {
		t.Errorf("borrowing condition %+v", c)
	}
	// A later rewrite of the status by the plugin keeps it.
	if err := writer.Apply(ctx, "team", "llm", "uid-llm", pc); err != nil {
		t.Fatal(err)
	}
	if c := cond(); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("after a rewrite, borrowing condition %+v", c)
	}

	end := start
	end.Active = false
	e.Emit(ctx, end)
	if c := cond(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Cleared" {
		t.Errorf("after the end, borrowing condition %+v", c)
	}
	if n := testutil.ToFloat64(counter.WithLabelValues("n1", string(incident.Borrowing), "GPU-0")); n != 1 {
		t.Errorf("counter %v, want 1 (ends do not count)", n)
	}
}

// TestEmitterKinds: every kind's start is one Warning Event on the claim
// and one on the pod (or, without a known container, on the claim alone),
// naming the GPU and any neighbour, a True condition of its kind with its
// reason, and one count under its kind and GPU.
func TestEmitterKinds(t *testing.T) {
	neighbour := share
	neighbour.ClaimName, neighbour.ClaimUID, neighbour.SoftBytes = "batch", "uid-batch", 80<<30
	for _, tc := range []struct {
		inc        incident.Incident
		wantEvents []string
		reason     string
		note       []string
	}{
		{incident.Incident{Kind: incident.AtHardLimit, Active: true, Container: app, Share: share, UsedBytes: 60 << 30},
			[]string{"ResourceClaim/llm", "Pod/llm-0"}, "Observed", []string{"GPU GPU-0", "hard limit"}},
		{incident.Incident{Kind: incident.MPSEvicted, Active: true, Container: app, Share: share, Neighbour: &neighbour, Detail: "pid 7"},
			[]string{"ResourceClaim/llm", "Pod/llm-0"}, "Terminated", []string{"GPU GPU-0", "when claim team/batch, within its 80Gi request"}},
		{incident.Incident{Kind: incident.MPSTerminated, Active: true, Container: app, Share: share, Neighbour: &neighbour, Detail: "fatal GPU exception"},
			[]string{"ResourceClaim/llm", "Pod/llm-0"}, "Terminated", []string{"GPU GPU-0", "because of claim team/batch"}},
		{incident.Incident{Kind: incident.MPSWedged, Active: true, Container: app, Share: share, Neighbour: &neighbour},
			[]string{"ResourceClaim/llm", "Pod/llm-0"}, "Refused", []string{"GPU GPU-0", "a client of claim team/batch has not"}},
		{incident.Incident{Kind: incident.MPSTerminated, Active: true, Share: share},
			[]string{"ResourceClaim/llm"}, "Terminated", []string{"MPS terminated a client on GPU GPU-0"}},
	} {
		t.Run(string(tc.inc.Kind)+"/"+tc.inc.Container.Pod, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client := fake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team", UID: "uid-llm"}})
			broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
			broadcaster.StartRecordingToSink(ctx.Done())
			defer broadcaster.Shutdown()
			writer := claimstatus.NewWriter(client, "gpufrac-n1", "n1")
			pc := &plan.Claim{UID: "uid-llm", Namespace: "team", Name: "llm", Devices: []plan.Device{{Request: "gpu", Pool: "n1", Device: "gpu-0",
				GPU: domain.GPU{UUID: "GPU-0"}, SoftLimitBytes: 40 << 30, HardLimitBytes: 60 << 30, ComputeMode: "TimeSlicing", Enforcement: "dmem"}}}
			sid := types.UID("s1")
			pc.Devices[0].ShareID = &sid
			if err := writer.Apply(ctx, "team", "llm", "uid-llm", pc); err != nil {
				t.Fatal(err)
			}
			counter := incident.NewCounter()
			e := &incident.Emitter{Recorder: broadcaster.NewRecorder(scheme.Scheme, "gpufrac-kubelet-plugin/n1"), Conditions: writer, Counter: counter}
			inc := tc.inc
			inc.Node, inc.Time = "n1", time.Unix(100, 0)
			e.Emit(ctx, inc)

			var got []string
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				list, err := client.EventsV1().Events("team").List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				got = nil
				for _, ev := range list.Items {
					if ev.Type != "Warning" || ev.Reason != string(inc.Kind) {
						t.Errorf("event %s %s, want Warning %s", ev.Type, ev.Reason, inc.Kind)
					}
					for _, n := range tc.note {
						if !strings.Contains(ev.Note, n) {
							t.Errorf("event note %q lacks %q", ev.Note, n)
						}
					}
					got = append(got, ev.Regarding.Kind+"/"+ev.Regarding.Name)
				}
				return len(got) >= len(tc.wantEvents), nil
			}); err != nil {
				t.Fatalf("events %v, want %v: %v", got, tc.wantEvents, err)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.wantEvents))
			if !slices.Equal(got, want) {
				t.Errorf("events on %v, want %v", got, want)
			}
			c, err := client.ResourceV1().ResourceClaims("team").Get(ctx, "llm", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cond := apimeta.FindStatusCondition(c.Status.Devices[0].Conditions, string(inc.Kind))
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != tc.reason {
				t.Errorf("condition %+v, want True with reason %s", cond, tc.reason)
			}
			if n := testutil.ToFloat64(counter.WithLabelValues("n1", string(inc.Kind), "GPU-0")); n != 1 {
				t.Errorf("counter %v, want 1", n)
			}
		})
	}
}

// TestStartAtZero: every kind of every GPU is a series at 0 before any
// incident, and an incident then counts 1 on its own series only.
func TestStartAtZero(t *testing.T) {
	counter := incident.NewCounter()
	incident.StartAtZero(counter, "node-a", []string{"GPU-a", "GPU-b"})
	if got, want := testutil.CollectAndCount(counter), 2*len(incident.Kinds); got != want {
		t.Fatalf("series before any incident: %d, want %d", got, want)
	}
	for _, kind := range incident.Kinds {
		if v := testutil.ToFloat64(counter.WithLabelValues("node-a", string(kind), "GPU-b")); v != 0 {
			t.Fatalf("%s on GPU-b starts at %v, want 0", kind, v)
		}
	}
	counter.WithLabelValues("node-a", string(incident.MPSEvicted), "GPU-a").Inc()
	if v := testutil.ToFloat64(counter.WithLabelValues("node-a", string(incident.MPSEvicted), "GPU-a")); v != 1 {
		t.Fatalf("after one eviction: %v, want 1", v)
	}
	if got, want := testutil.CollectAndCount(counter), 2*len(incident.Kinds); got != want {
		t.Fatalf("series after one incident: %d, want %d (no new series)", got, want)
	}
}
