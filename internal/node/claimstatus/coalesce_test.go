// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
)

// writerEnv runs a Writer with a clear delay against a fake API server
// holding one claim of smPlan.
type writerEnv struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	w      *claimstatus.Writer
	stop   func()
}

func newWriterEnv(t *testing.T, delay time.Duration) *writerEnv {
	_, ctx := ktesting.NewTestContext(t)
	pl := smPlan()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID}}
	e := &writerEnv{t: t, ctx: ctx, client: fake.NewClientset(claim)}
	e.w = claimstatus.NewWriter(e.client, "gpufrac.dev/n", "n")
	e.w.SetClearDelay(delay)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { e.w.Run(runCtx, 2) })
	e.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(e.stop)
	return e
}

// read is what the kubelet helper reads before Prepare.
func (e *writerEnv) read() *resourceapi.ResourceClaim {
	pl := smPlan()
	c, err := e.client.ResourceV1().ResourceClaims(pl.Namespace).Get(e.ctx, pl.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// prepare is Prepare as the plugin does it: Seen, then Prepared.
func (e *writerEnv) prepare(pl *plan.Claim) {
	e.w.Seen(e.read())
	e.w.Prepared(pl)
}

// settle waits until nothing is pending, and past any delayed clear.
func (e *writerEnv) settle(delay time.Duration) {
	time.Sleep(delay + 50*time.Millisecond)
	settled(e.t, e.w)
}

func (e *writerEnv) updates(from int) int {
	n := 0
	for _, v := range verbs(e.client, from) {
		if v == "update" {
			n++
		}
	}
	return n
}

func (e *writerEnv) ours() int {
	n := 0
	for _, d := range e.read().Status.Devices {
		if d.Driver == "gpufrac.dev" {
			n++
		}
	}
	return n
}

func TestStatusWritesOnlyWhatDiffers(t *testing.T) {
	// A case that must act within the delay uses a delay no stall of a
	// busy machine reaches, and stops the writer, which makes the held
	// back clear's decision at once (the shutdown flush); a case that
	// waits for the delay uses a short one.
	const short, long = 100 * time.Millisecond, time.Hour
	other := smPlan()
	other.Devices[0].HardLimitBytes = 20 << 30
	tests := []struct {
		name  string
		delay time.Duration
		// then runs after a first Prepare's write settled.
		then        func(e *writerEnv)
		wantUpdates int
		wantEntries int
	}{{
		name:        "re-prepare of a claim carrying the same entries",
		delay:       short,
		then:        func(e *writerEnv) { e.prepare(smPlan()) },
		wantUpdates: 0, wantEntries: 1,
	}, {
		name:        "re-prepare with other content",
		delay:       short,
		then:        func(e *writerEnv) { e.prepare(other) },
		wantUpdates: 1, wantEntries: 1,
	}, {
		name:  "unprepare of a claim that stays allocated clears after the delay",
		delay: short,
		then: func(e *writerEnv) {
			pl := smPlan()
			e.w.Unprepared(pl.Namespace, pl.Name, pl.UID)
		},
		wantUpdates: 1, wantEntries: 0,
	}, {
		name:  "unprepare, then prepared again within the delay",
		delay: long,
		then: func(e *writerEnv) {
			pl := smPlan()
			e.w.Unprepared(pl.Namespace, pl.Name, pl.UID)
			e.prepare(pl)
		},
		wantUpdates: 0, wantEntries: 1,
	}, {
		name:  "unprepare, then prepared again with other content",
		delay: long,
		then: func(e *writerEnv) {
			pl := smPlan()
			e.w.Unprepared(pl.Namespace, pl.Name, pl.UID)
			e.prepare(other)
		},
		wantUpdates: 1, wantEntries: 1,
	}, {
		name:  "unprepare, then the claim is deallocated (the API server drops the entries)",
		delay: long,
		then: func(e *writerEnv) {
			pl := smPlan()
			e.w.Unprepared(pl.Namespace, pl.Name, pl.UID)
			c := e.read()
			c.Status.Devices = nil // what dropDeallocatedStatusDevices does
			if _, err := e.client.ResourceV1().ResourceClaims(pl.Namespace).UpdateStatus(e.ctx, c, metav1.UpdateOptions{}); err != nil {
				e.t.Fatal(err)
			}
		},
		wantUpdates: 1, // the deallocation's own
		wantEntries: 0,
	}, {
		name:  "unprepare, then the claim is deleted",
		delay: long,
		then: func(e *writerEnv) {
			pl := smPlan()
			e.w.Unprepared(pl.Namespace, pl.Name, pl.UID)
			if err := e.client.ResourceV1().ResourceClaims(pl.Namespace).Delete(e.ctx, pl.Name, metav1.DeleteOptions{}); err != nil {
				e.t.Fatal(err)
			}
		},
		wantUpdates: 0, wantEntries: -1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newWriterEnv(t, tc.delay)
			e.prepare(smPlan())
			e.settle(0)
			if e.ours() != 1 {
				t.Fatalf("after the first Prepare: %d entries", e.ours())
			}
			from := len(e.client.Actions())
			tc.then(e)
			if tc.delay == long {
				e.stop()
			} else {
				e.settle(tc.delay)
			}
			if e.w.Pending() != 0 {
				t.Errorf("%d writes pending at the end", e.w.Pending())
			}
			if got := e.updates(from); got != tc.wantUpdates {
				t.Errorf("%d status updates (%v), want %d", got, verbs(e.client, from), tc.wantUpdates)
			}
			if tc.wantEntries >= 0 {
				if got := e.ours(); got != tc.wantEntries {
					t.Errorf("%d entries of this driver, want %d", got, tc.wantEntries)
				}
			}
		})
	}
}

// A re-prepare keeps the Ready condition's transition time: it did not
// transition.
func TestRePrepareKeepsTheTransitionTime(t *testing.T) {
	e := newWriterEnv(t, 0)
	e.prepare(smPlan())
	e.settle(0)
	before := e.read().Status.Devices[0].Conditions[0].LastTransitionTime
	time.Sleep(1100 * time.Millisecond) // metav1.Time has second precision
	other := smPlan()
	other.Devices[0].HardLimitBytes = 20 << 30
	e.prepare(other)
	e.settle(0)
	after := e.read().Status.Devices[0].Conditions[0]
	if !after.LastTransitionTime.Equal(&before) {
		t.Errorf("transition time %v, want %v kept", after.LastTransitionTime, before)
	}
	if after.Message == "" || e.read().Status.Devices[0].Data == nil {
		t.Error("the new content was not written")
	}
}

// A clear still waiting for its delay is written when the writer stops.
func TestPendingClearFlushedAtShutdown(t *testing.T) {
	e := newWriterEnv(t, time.Hour)
	e.prepare(smPlan())
	e.settle(0)
	pl := smPlan()
	e.w.Unprepared(pl.Namespace, pl.Name, pl.UID)
	if e.ours() != 1 {
		t.Fatal("cleared before the delay")
	}
	e.stop()
	if e.ours() != 0 || e.w.Pending() != 0 {
		t.Errorf("after Run returned: %d entries, %d pending, want the clear written", e.ours(), e.w.Pending())
	}
}
