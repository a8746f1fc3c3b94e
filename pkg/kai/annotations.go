// Package kai translates KAI-Scheduler GPU-sharing annotations into DRA
// claims for gpufrac, so workloads written for KAI keep working: a pure
// function from a Pod (and the GPU memory sizes in the cluster) to the
// ResourceClaimTemplates it needs and the changes to the Pod that use them.
// The admission webhook and `kubectl gpufrac translate` both call it.
package kai

import (
	"fmt"
	"strings"
)

// The annotations of the design's table.
const (
	AnnotationFraction      = "gpu-fraction"
	AnnotationMemory        = "gpu-memory"
	AnnotationNumDevices    = "gpu-fraction-num-devices"
	AnnotationContainerName = "gpu-fraction-container-name"
	AnnotationSharingMode   = "kai.scheduler/gpu-compute-sharing-mode"

	containerPrefixNvidia = "nvidia.com/container."
	containerPrefixKAI    = "kai.scheduler/container."
	suffixMemoryRequest   = ".gpu-memory.request"
	suffixMemoryLimit     = ".gpu-memory.limit"
	suffixComputeMode     = ".gpu-compute.mode"
	suffixPortionLimit    = ".gpu-memory.portion.limit"
	// suffixDevices is written by KAI's binder; it is output, never input.
	suffixDevices = ".gpus.devices"

	// AnnotationTranslated marks a pod this translator already changed.
	AnnotationTranslated = "gpufrac.dev/kai-templates"
)

// containerAnnotation splits a per-container annotation into its container
// and its setting (the suffix), or returns ok false.
func containerAnnotation(key string) (container, suffix string, ok bool) {
	for _, prefix := range []string{containerPrefixNvidia, containerPrefixKAI} {
		rest, found := strings.CutPrefix(key, prefix)
		if !found {
			continue
		}
		for _, s := range []string{suffixMemoryRequest, suffixMemoryLimit, suffixComputeMode, suffixPortionLimit, suffixDevices} {
			if c, found := strings.CutSuffix(rest, s); found && c != "" {
				if (prefix == containerPrefixKAI) != (s == suffixPortionLimit) {
					// Each setting belongs to one prefix in KAI's scheme.
					return "", "", false
				}
				return c, s, true
			}
		}
	}
	return "", "", false
}

// HasAnnotations reports whether a pod carries any annotation this package
// translates (the binder's output annotation does not count).
func HasAnnotations(annotations map[string]string) bool {
	for k := range annotations {
		switch k {
		case AnnotationFraction, AnnotationMemory, AnnotationNumDevices, AnnotationContainerName, AnnotationSharingMode:
			return true
		}
		if _, s, ok := containerAnnotation(k); ok && s != suffixDevices {
			return true
		}
	}
	return false
}

// Error is one annotation that cannot be translated.
type Error struct {
	Annotation string
	Value      string
	Rule       string
}

func (e Error) Error() string {
	return fmt.Sprintf("annotation %s=%q: %s", e.Annotation, e.Value, e.Rule)
}

// Errors is every problem of a pod, so one round trip fixes them all.
type Errors []Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return "cannot translate KAI GPU-sharing annotations: " + strings.Join(msgs, "; ")
}
