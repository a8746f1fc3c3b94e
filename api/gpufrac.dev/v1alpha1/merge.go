// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// Merge layers configs field by field: a field set in a later config wins
// over the same field in an earlier one, and unset fields let the earlier
// value through. Callers pass the DeviceClass's configs first and the
// claim's after, so a platform team sets defaults that users may override
// field by field (a class that selects SMSharing keeps it when a claim only
// sets memoryLimit).
//
// The one exception to field-by-field: a config that changes the compute
// mode drops the activeThreadPercentage inherited from earlier configs.
//
// Nil configs are skipped. The result is a fresh object that shares no
// memory with the inputs, carries this API's apiVersion and kind, and is not
// defaulted.
func Merge(configs ...*FractionConfig) *FractionConfig {
	out := &FractionConfig{}
	out.APIVersion, out.Kind = APIVersion, Kind
	for _, c := range configs {
		if c == nil {
			continue
		}
		if c.MemoryLimit != nil {
			q := c.MemoryLimit.DeepCopy()
			out.MemoryLimit = &q
		}
		if c.ComputeMode != "" {
			if out.ComputeMode != "" && c.ComputeMode != out.ComputeMode {
				// activeThreadPercentage only means something under the
				// mode it was set for; a claim that switches a class's
				// SMSharing to TimeSlicing must not inherit a setting it
				// cannot unset and that would make its config invalid.
				out.ActiveThreadPercentage = nil
			}
			out.ComputeMode = c.ComputeMode
		}
		if c.ActiveThreadPercentage != nil {
			v := *c.ActiveThreadPercentage
			out.ActiveThreadPercentage = &v
		}
	}
	return out
}

// DeepCopyInto copies c into out; out shares no memory with c afterwards.
func (c *FractionConfig) DeepCopyInto(out *FractionConfig) {
	*out = *c
	if c.MemoryLimit != nil {
		q := c.MemoryLimit.DeepCopy()
		out.MemoryLimit = &q
	}
	if c.ActiveThreadPercentage != nil {
		v := *c.ActiveThreadPercentage
		out.ActiveThreadPercentage = &v
	}
}

// DeepCopy returns a copy of c that shares no memory with it.
func (c *FractionConfig) DeepCopy() *FractionConfig {
	if c == nil {
		return nil
	}
	out := new(FractionConfig)
	c.DeepCopyInto(out)
	return out
}
