// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package translated

// Row is one aspect of a pod as the other scheduler (KAI-Scheduler or
// HAMi) would handle it and as gpufrac does, for `kubectl gpufrac
// translate`'s side-by-side comparison.
type Row struct {
	Aspect, Theirs, Gpufrac string
}

// Differs reports whether the two sides say different things.
func (r Row) Differs() bool { return r.Theirs != r.Gpufrac }
