// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// Default fills the fields that have a static default. It runs after Merge,
// so that a DeviceClass's choice is not hidden by a default the claim never
// asked for.
//
// memoryLimit has no static default: it defaults to the share's guaranteed
// memory request, which only the code that sees the allocated claim knows
// (see EffectiveLimit).
func (c *FractionConfig) Default() {
	if c == nil {
		return
	}
	if c.APIVersion == "" {
		c.APIVersion = APIVersion
	}
	if c.Kind == "" {
		c.Kind = Kind
	}
	if c.ComputeMode == "" {
		c.ComputeMode = TimeSlicing
	}
}

// EffectiveComputeMode is the mode a config asks for, defaulted: code that
// reads an un-defaulted config (Validate does) must not read "" as a mode of
// its own.
func (c *FractionConfig) EffectiveComputeMode() ComputeMode {
	if c == nil || c.ComputeMode == "" {
		return TimeSlicing
	}
	return c.ComputeMode
}
