// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// Blocked is the pool-wide verdict for a Pending pod whose request memory
// keeps out of every node: whether the free memory of all the GPUs it may
// use (every candidate node, the selectors and taints applied) would hold
// it if it were in one piece (fragmentation: moving shares would make
// room) or not even then (capacity).
type Blocked struct {
	Cause   fragmentation.Cause `json:"cause"`
	Claim   string              `json:"claim"`
	Request string              `json:"request"`
	// NeedBytes is what one share takes; Count how many shares.
	NeedBytes int64 `json:"needBytes"`
	Count     int64 `json:"count"`
	// FreeBytes is the free memory of the GPUs the request may use, in
	// all; LargestFreeBytes the most on one.
	FreeBytes        int64  `json:"freeBytes"`
	LargestFreeBytes int64  `json:"largestFreeBytes"`
	GPUs             int    `json:"gpus"`
	Message          string `json:"message"`
}

// blocked is the verdict for the first request that memory alone keeps
// out of every candidate node, nil when none is.
func blocked(pending []*resourceapi.ResourceClaim, diags []nodeDiag) *Blocked {
	for _, c := range pending {
		for _, group := range alts(c) {
			for _, a := range group {
				if b := blockedAlt(a, diags); b != nil {
					return b
				}
			}
		}
	}
	return nil
}

func blockedAlt(a alt, diags []nodeDiag) *Blocked {
	if a.all || !memoryBound(a, diags) {
		return nil
	}
	var free, capacity []int64
	var need, largest int64
	for _, nd := range diags {
		for _, d := range nd.diags {
			if d.a.claim != a.claim || d.a.request != a.request {
				continue
			}
			if d.fits {
				return nil
			}
			for _, e := range d.eligible {
				free = append(free, e.free)
				capacity = append(capacity, resourceslices.CapacityBytes(e.dev))
				largest = max(largest, e.free)
				// Shares round onto each GPU's policy; the smallest is
				// what the most favourable GPU would take.
				if need == 0 || e.need < need {
					need = e.need
				}
			}
		}
	}
	cause := fragmentation.Verdict(free, capacity, need, a.count)
	if cause == fragmentation.Fits || len(free) == 0 {
		return nil
	}
	b := &Blocked{Cause: cause, Claim: a.claimName(), Request: a.request, NeedBytes: need, Count: a.count, LargestFreeBytes: largest, GPUs: len(free)}
	for _, f := range free {
		b.FreeBytes += max(f, 0)
	}
	per := fmt.Sprintf("%s on one GPU", q(need))
	if a.count > 1 {
		per = fmt.Sprintf("%s on each of %d GPUs", q(need), a.count)
	}
	if cause == fragmentation.ByFragmentation {
		b.Message = fmt.Sprintf("blocked by fragmentation, not capacity: the %d GPUs it may use have %s free in all, enough for %s, but at most %s on one; moving shares would make room (kubectl gpufrac status lists the GPUs that would free up)",
			b.GPUs, q(b.FreeBytes), per, q(largest))
	} else {
		b.Message = fmt.Sprintf("blocked by capacity: the %d GPUs it may use have %s free in all, less than %s; only more GPUs or fewer shares make room",
			b.GPUs, q(b.FreeBytes), per)
	}
	return b
}
