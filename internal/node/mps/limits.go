// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import "fmt"

// NamespaceLimits are the limits `server set <s> --pinned-memory-limit=
// --active-thread-percentage=` gives the shared MPS v3 server's default
// namespace. No claim's client connects there: only one that missed its
// namespace's socket would (NVIDIA's Dynamo guide: set default-namespace
// limits low), so they are kept small enough to make such a client fail
// at once rather than share the GPU unbounded. TimeSlicing clients use the
// main socket's per-UID servers, which these do not touch.
type NamespaceLimits struct {
	// PinnedMemoryMiB: memory values are whole MiB ("<N>M", NVIDIA's
	// mpsv3-interface); at least 1.
	PinnedMemoryMiB int64
	// ActiveThreadPercentage: 1..100 (0 means unlimited to NVIDIA's KAI
	// operator, which refuses it).
	ActiveThreadPercentage int
}

// DefaultSafetyLimits are the floors of a namespace's limits: 64 MiB is
// below what a CUDA context needs to do useful work, 1% the smallest share
// MPS accepts.
var DefaultSafetyLimits = NamespaceLimits{PinnedMemoryMiB: 64, ActiveThreadPercentage: 1}

// withDefaults fills zero fields and validates the rest.
func (l NamespaceLimits) withDefaults() (NamespaceLimits, error) {
	if l.PinnedMemoryMiB == 0 {
		l.PinnedMemoryMiB = DefaultSafetyLimits.PinnedMemoryMiB
	}
	if l.ActiveThreadPercentage == 0 {
		l.ActiveThreadPercentage = DefaultSafetyLimits.ActiveThreadPercentage
	}
	if l.PinnedMemoryMiB < 1 {
		return l, fmt.Errorf("MPS default-namespace pinned memory limit %d MiB: must be at least 1 MiB", l.PinnedMemoryMiB)
	}
	if l.ActiveThreadPercentage < 1 || l.ActiveThreadPercentage > 100 {
		return l, fmt.Errorf("MPS default-namespace active thread percentage %d: must be 1 to 100", l.ActiveThreadPercentage)
	}
	return l, nil
}

// Validate says what is wrong with l, zero fields standing for the
// defaults.
func (l NamespaceLimits) Validate() error {
	_, err := l.withDefaults()
	return err
}
