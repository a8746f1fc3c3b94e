// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer

import (
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestClaimLocks(t *testing.T) {
	l := newClaimLocks()
	unlockA := l.lock("a")
	// Another claim is never held up by a.
	done := make(chan struct{})
	go func() {
		l.lock("b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("locking claim b waited for claim a")
	}
	// The same claim waits.
	var order []string
	var mu sync.Mutex
	got := make(chan struct{})
	go func() {
		unlock := l.lock("a")
		mu.Lock()
		order = append(order, "second")
		mu.Unlock()
		unlock()
		close(got)
	}()
	// Wait until the second caller is registered as a user of a's lock.
	for {
		l.mu.Lock()
		users := l.locks["a"].users
		l.mu.Unlock()
		if users == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	order = append(order, "first")
	mu.Unlock()
	unlockA()
	<-got
	if len(order) != 2 || order[0] != "first" {
		t.Errorf("order %v, want first before second", order)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.locks) != 0 {
		t.Errorf("%d lock entries left after every holder unlocked: %v", len(l.locks), l.locks)
	}
	_ = types.UID("")
}
