// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// claimLocks serialises calls for one claim and nothing else. It replaces
// keymutex.NewHashed(0), which hashes every claim onto one of GOMAXPROCS
// mutexes: on a 2-core node two claims out of eight in flight shared a
// mutex, so Prepares of unrelated claims queued behind each other's file
// writes (95% of the mutex wait in the block profile of
// BenchmarkPrepareOverGRPC at concurrency 8, docs/benchmarks.md).
type claimLocks struct {
	mu    sync.Mutex
	locks map[types.UID]*claimLock
}

type claimLock struct {
	mu    sync.Mutex
	users int // holders and waiters; the entry goes when it drops to 0
}

func newClaimLocks() *claimLocks {
	return &claimLocks{locks: map[types.UID]*claimLock{}}
}

// lock locks uid and returns its unlock.
func (c *claimLocks) lock(uid types.UID) (unlock func()) {
	c.mu.Lock()
	l, ok := c.locks[uid]
	if !ok {
		l = &claimLock{}
		c.locks[uid] = l
	}
	l.users++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		l.users--
		if l.users == 0 {
			delete(c.locks, uid)
		}
		c.mu.Unlock()
	}
}
