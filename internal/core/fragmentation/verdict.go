// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fragmentation

import "slices"

// Cause is what keeps a request out of a pool.
type Cause string

const (
	// Fits means some GPU has the free memory a share needs.
	Fits Cause = ""
	// ByFragmentation means the pool's GPUs together have the free memory the
	// request needs, no single one does (a share cannot span GPUs):
	// moving shares would make room.
	ByFragmentation Cause = "Fragmentation"
	// ByCapacity means even all the pool's free memory is less than the
	// request needs: only more GPUs, or fewer shares, make room.
	ByCapacity Cause = "Capacity"
)

// Verdict says why count shares of need bytes each do not fit on GPUs
// with the given free memory (one entry per GPU the request may use), or
// Fits when enough GPUs have need free each. capacity, when known, is each
// GPU's whole memory (capacity[i] is the GPU of free[i]; nil when not
// known): a share larger than every GPU's capacity is blocked by capacity
// whatever the free memory adds up to, since no move of other shares can
// make room for it.
func Verdict(free, capacity []int64, need, count int64) Cause {
	if len(capacity) > 0 && !slices.ContainsFunc(capacity, func(c int64) bool { return c >= need }) {
		return ByCapacity
	}
	count = max(count, 1)
	var total, fitting int64
	for _, f := range free {
		if f >= need {
			fitting++
		}
		total += max(f, 0)
	}
	switch {
	case fitting >= count:
		return Fits
	case total >= need*count:
		return ByFragmentation
	default:
		return ByCapacity
	}
}
