// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ATPMin and ATPMax bound activeThreadPercentage, as CUDA MPS does.
const (
	ATPMin = 1
	ATPMax = 100
)

var atpRangeDetail = fmt.Sprintf("must be between %d and %d", ATPMin, ATPMax)

// SupportedComputeModes lists the compute modes in the order error
// messages name them.
var SupportedComputeModes = []ComputeMode{TimeSlicing, SMSharing}

// Validate checks the rules that hold for a config on its own, wherever it
// comes from: a DeviceClass, a claim, or the merge of both. It returns every
// problem, not the first, so the admission webhook and `kubectl gpufrac
// validate` can show them all at once; paths are under fldPath.
//
// It accepts an un-defaulted config (an empty computeMode is judged as
// TimeSlicing, the default) because the webhook sees configs before any
// default is applied. A nil config is valid: it asks for nothing.
//
// Rules that need the claim (the memory request) are in
// ValidateAgainstRequest.
func Validate(cfg *FractionConfig, fldPath *field.Path) field.ErrorList {
	if cfg == nil {
		return nil
	}
	var errs field.ErrorList

	if q := cfg.MemoryLimit; q != nil && q.Sign() <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("memoryLimit"), q.String(), "must be greater than zero"))
	}

	modeKnown := true
	switch cfg.ComputeMode {
	case "", TimeSlicing, SMSharing:
	default:
		modeKnown = false
		errs = append(errs, field.NotSupported(fldPath.Child("computeMode"), string(cfg.ComputeMode), SupportedComputeModes))
	}

	if atp := cfg.ActiveThreadPercentage; atp != nil {
		p := fldPath.Child("activeThreadPercentage")
		if *atp < ATPMin || *atp > ATPMax {
			errs = append(errs, field.Invalid(p, *atp, atpRangeDetail))
		}
		// Under an unknown mode nobody can tell whether the setting
		// applies; the mode's own error is the one to fix first.
		if modeKnown && cfg.EffectiveComputeMode() != SMSharing {
			reason := fmt.Sprintf("only allowed with computeMode %s, not %s", SMSharing, TimeSlicing)
			if cfg.ComputeMode == "" {
				// Say so: the author may believe a DeviceClass sets the mode.
				reason += " (the default when computeMode is unset)"
			}
			errs = append(errs, field.Forbidden(p, reason))
		}
	}
	return errs
}

// ValidateAgainstRequest checks the rules that need the claim: the limit of
// a share must not be below its guaranteed memory request (the `memory`
// capacity the scheduler set aside, which the driver keeps as the soft
// limit), and, when the GPU is known (gpuMemory non-nil), must not exceed
// the GPU's memory, which no share could ever use.
//
// An unset memoryLimit defaults to the request and so always passes, and a
// limit that Validate already refuses is not reported twice.
func ValidateAgainstRequest(cfg *FractionConfig, request resource.Quantity, gpuMemory *resource.Quantity, fldPath *field.Path) field.ErrorList {
	if cfg == nil || cfg.MemoryLimit == nil || cfg.MemoryLimit.Sign() <= 0 {
		return nil
	}
	limit := cfg.MemoryLimit
	p := fldPath.Child("memoryLimit")
	var errs field.ErrorList
	if limit.Cmp(request) < 0 {
		errs = append(errs, field.Invalid(p, limit.String(),
			fmt.Sprintf("must not be below the guaranteed memory request %s", request.String())))
	}
	if gpuMemory != nil && limit.Cmp(*gpuMemory) > 0 {
		errs = append(errs, field.Invalid(p, limit.String(),
			fmt.Sprintf("must not exceed the GPU's memory %s", gpuMemory.String())))
	}
	return errs
}

// EffectiveLimit is the hard memory limit of a share: the configured
// memoryLimit, or the share's guaranteed request when none is configured.
// The result is a copy the caller may keep.
func EffectiveLimit(cfg *FractionConfig, request resource.Quantity) resource.Quantity {
	if cfg != nil && cfg.MemoryLimit != nil {
		return cfg.MemoryLimit.DeepCopy()
	}
	return request.DeepCopy()
}
