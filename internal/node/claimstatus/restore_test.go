// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// runWriter starts a writer over client, as a (re)started plugin does,
// reporting cleared claims into the returned function's result.
func runWriter(t *testing.T, client *fake.Clientset, clearDelay time.Duration) (w *claimstatus.Writer, cleared func() []types.UID, stop func()) {
	_, ctx := ktesting.NewTestContext(t)
	w = claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	w.SetClearDelay(clearDelay)
	var mu sync.Mutex
	var uids []types.UID
	w.SetOnCleared(func(uid types.UID) {
		mu.Lock()
		defer mu.Unlock()
		uids = append(uids, uid)
	})
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx, 2) })
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return w, func() []types.UID { mu.Lock(); defer mu.Unlock(); return slices.Clone(uids) }, stop
}

func settled(t *testing.T, w *claimstatus.Writer) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return w.Pending() == 0, nil
	}); err != nil {
		t.Fatalf("status writes still pending: %v", err)
	}
}

// TestRestoredWritesOnlyWhatIsMissing: at start the status of a claim an
// earlier process prepared is written if that process never wrote it, and
// left alone (conditions it set included) if it did, or if the claim was
// deallocated since.
func TestRestoredWritesOnlyWhatIsMissing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pl := smPlan()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	client := fake.NewClientset(claim)
	get := func() *resourceapi.ResourceClaim {
		c, err := client.ResourceV1().ResourceClaims(pl.Namespace).Get(ctx, pl.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Killed before its Prepared write: the restart writes it.
	w, _, stop := runWriter(t, client, 0)
	w.Restored(pl)
	settled(t, w)
	if got := get().Status.Devices; len(got) != 1 || got[0].Conditions[0].Type != claimstatus.ConditionReady {
		t.Fatalf("status after Restored of an unwritten claim: %+v", got)
	}
	w.MPSServerState(pl, domain.MPSServer{Reason: "DaemonRestarted", Message: "gone", Since: time.Now()})
	settled(t, w)
	stop()

	// Written, with an MPS condition: the restart keeps it as it is.
	w, _, stop = runWriter(t, client, 0)
	from := len(client.Actions())
	w.Restored(pl)
	settled(t, w)
	if got := verbs(client, from); !slices.Equal(got, []string{"get"}) {
		t.Errorf("Restored of a written claim made %v, want one get", got)
	}
	if got := get().Status.Devices; len(got) != 1 || len(got[0].Conditions) != 2 {
		t.Errorf("the MPS condition the earlier process set was lost: %+v", got)
	}
	stop()

	// Deallocated since (the kubelet's Unprepare follows): nothing written.
	c := get()
	c.Status = resourceapi.ResourceClaimStatus{}
	if _, err := client.ResourceV1().ResourceClaims(pl.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, _, _ = runWriter(t, client, 0)
	from = len(client.Actions())
	w.Restored(pl)
	settled(t, w)
	if got := verbs(client, from); !slices.Equal(got, []string{"get"}) {
		t.Errorf("Restored of a deallocated claim made %v, want one get", got)
	}
}

// TestOnClearedReportsEachClearWritten: the checkpoint's record of a
// pending clear may go once the clear is written or found unnecessary
// (claim gone), not when a re-prepare replaced it.
func TestOnClearedReportsEachClearWritten(t *testing.T) {
	pl := smPlan()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID}}
	client := fake.NewClientset(claim)
	w, cleared, stop := runWriter(t, client, 0)
	w.Prepared(pl)
	settled(t, w)
	w.Unprepared(pl.Namespace, pl.Name, pl.UID)
	settled(t, w)
	w.Unprepared("ns", "gone", "uid-gone")
	settled(t, w)
	if got, want := cleared(), []types.UID{pl.UID, "uid-gone"}; !slices.Equal(got, want) {
		t.Errorf("cleared %v, want %v", got, want)
	}
	stop()
	w, cleared, _ = runWriter(t, client, time.Hour)
	w.Unprepared(pl.Namespace, pl.Name, pl.UID)
	w.Prepared(pl)
	settled(t, w)
	if got := cleared(); len(got) != 0 {
		t.Errorf("a clear replaced by a re-prepare was reported: %v", got)
	}
}
