// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
)

// burstEnv is a writer over n claims with SetBurst(quiet, maxWait).
func burstEnv(t *testing.T, n int, quiet, maxWait time.Duration) (*claimstatus.Writer, *fake.Clientset, []*plan.Claim) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	var plans []*plan.Claim
	for i := range n {
		pl := smPlan()
		pl.Name, pl.UID = fmt.Sprintf("c%d", i), types.UID(fmt.Sprintf("uid-%d", i))
		if _, err := client.ResourceV1().ResourceClaims(pl.Namespace).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		plans = append(plans, pl)
	}
	w := claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	w.SetBurst(quiet, maxWait)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx, 2) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w, client, plans
}

func statusUpdates(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// TestStatusWritesWaitForTheBurst: the status writes of a burst of
// Prepares wait until Prepares stop arriving, then all land.
func TestStatusWritesWaitForTheBurst(t *testing.T) {
	w, client, plans := burstEnv(t, 20, 500*time.Millisecond, time.Minute)
	for _, pl := range plans {
		w.Prepared(pl)
	}
	time.Sleep(100 * time.Millisecond)
	if n := statusUpdates(client); n != 0 {
		t.Errorf("%d status writes during the burst's quiet time, want none yet", n)
	}
	settled(t, w)
	if n := statusUpdates(client); n != len(plans) {
		t.Errorf("%d status writes after the burst, want %d", n, len(plans))
	}
}

// TestStatusWritesWaitNoLongerThanTheCap: Prepares that never stop do not
// starve the status: each write waits at most maxWait.
func TestStatusWritesWaitNoLongerThanTheCap(t *testing.T) {
	w, client, plans := burstEnv(t, 40, 200*time.Millisecond, 300*time.Millisecond)
	start := time.Now()
	firstSeen := time.Duration(0)
	for _, pl := range plans {
		w.Prepared(pl)
		time.Sleep(30 * time.Millisecond) // a Prepare every 30 ms for 1.2 s: always within the quiet time
		if firstSeen == 0 && statusUpdates(client) > 0 {
			firstSeen = time.Since(start)
		}
	}
	if firstSeen == 0 {
		t.Fatalf("no status written during a %v stream of Prepares, with writes capped at 300ms", time.Since(start))
	}
	settled(t, w)
	if n := statusUpdates(client); n != len(plans) {
		t.Errorf("%d status writes, want %d", n, len(plans))
	}
	t.Logf("first status write seen %v into the stream", firstSeen)
}
