// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kai translates KAI-Scheduler GPU-sharing annotations into DRA
// claims for gpufrac, so workloads written for KAI keep working: a pure
// function from a Pod (and the GPU memory sizes in the cluster) to the
// ResourceClaimTemplate it needs and the changes to the Pod that use it.
//
// What is accepted and refused is KAI's own admission, transcribed from its
// source (rules.go; docs/design/kai.md cites the file and function of each rule):
// a pod KAI admits is translated, a pod KAI refuses is refused with KAI's
// reason and the annotation named.
package kai

import (
	"fmt"
	"strings"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

// Pod-level annotations (KAI's constants.go).
const (
	AnnotationFraction      = "gpu-fraction"
	AnnotationMemory        = "gpu-memory"
	AnnotationNumDevices    = "gpu-fraction-num-devices"
	AnnotationContainerName = "gpu-fraction-container-name"
	// AnnotationSharingMode appears in KAI's docs only; KAI's code reads the
	// per-container mode. gpufrac reads it as the default of the latter.
	AnnotationSharingMode = "kai.scheduler/gpu-compute-sharing-mode"
)

// Per-container annotations: nvidia.com/container.<c><suffix> (NvFractions)
// and kai.scheduler/container.<c>.gpu-memory.portion.limit.
const (
	PrefixNvFractions = "nvidia.com/container."
	PrefixKAI         = "kai.scheduler/container."

	SuffixMemoryRequest  = ".gpu-memory.request"
	SuffixMemoryLimit    = ".gpu-memory.limit"
	SuffixDevices        = ".gpus.devices"
	SuffixComputeMode    = ".gpu-compute.mode"
	SuffixComputePortion = ".gpu-compute.portion"
	SuffixComputeRequest = ".gpu-compute.request"
	SuffixPortionLimit   = ".gpu-memory.portion.limit"
)

// Annotations and labels gpufrac writes on the pods it translates.
const (
	// AnnotationTranslated names the ResourceClaimTemplate the pod uses.
	AnnotationTranslated = "gpufrac.dev/kai-templates"
	// AnnotationInputs records the cluster facts the template was computed
	// from (GPU sizes, reserve), so gpufrac-controller creates exactly the
	// template the pod names whatever the cluster looks like later.
	AnnotationInputs = "gpufrac.dev/kai-inputs"
	// LabelTranslated selects translated pods for the controller's informer.
	LabelTranslated = "gpufrac.dev/kai-translated"
	// AnnotationRounding on a template says where gpufrac's memory differs
	// from what KAI's binder computes.
	AnnotationRounding = "gpufrac.dev/kai-rounding"
	// AnnotationComputeCap on a template says what became of KAI's compute
	// portion.
	AnnotationComputeCap = "gpufrac.dev/kai-compute"
)

// HasAnnotations reports whether a pod carries any annotation KAI's
// GPU-sharing admission reads.
func HasAnnotations(annotations map[string]string) bool {
	for k := range annotations {
		switch k {
		case AnnotationFraction, AnnotationMemory, AnnotationNumDevices, AnnotationContainerName, AnnotationSharingMode:
			return true
		}
		if strings.HasPrefix(k, PrefixNvFractions) {
			return true
		}
		if strings.HasPrefix(k, PrefixKAI) && strings.HasSuffix(k, SuffixPortionLimit) {
			return true
		}
	}
	return false
}

// Error is a pod KAI (or gpufrac's bounds) refuses: the annotation, its
// value and the rule.
type Error struct {
	Annotation string
	Value      string
	Rule       string
}

// maxValueBytes caps the annotation value an error repeats: a value may be
// up to 256 KiB (the API's limit on all annotations together), and the
// error goes into an admission denial and a terminal.
const maxValueBytes = 128

func (e Error) Error() string {
	if e.Annotation == "" {
		return e.Rule
	}
	// %q escapes control characters, so the value cannot act on a terminal.
	return fmt.Sprintf("annotation %s=%q: %s", safetext.Escape(safetext.Cap(e.Annotation, maxValueBytes)), safetext.Cap(e.Value, maxValueBytes), e.Rule)
}

// Errors is kept as a list so callers can print each problem; KAI stops at
// its first refusal, and so does the transcription.
type Errors []Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return "cannot translate KAI GPU-sharing annotations: " + strings.Join(msgs, "; ")
}
