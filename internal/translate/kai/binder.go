// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"fmt"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// What KAI-Scheduler's binder computes after its scheduler placed a pod,
// modelled from KAI's code (docs/design/kai.md, "KAI's binder to the MiB",
// names the files, functions and commits):
//
//   - the scheduler hands the binder the pod's portion as text,
//     fmt.Sprintf("%.2f", portion) (pkg/scheduler/cache/cache.go,
//     createBindRequest), so the binder works from the portion rounded to
//     hundredths, not from the annotation;
//   - the binder parses it and refuses a value that is not above 0
//     ("invalid received gpu portion"), then takes
//     uint64((GPU total MiB - reserve) * portion) MiB
//     (nvfractions setNvFractionsMemoryAnnotation, usableGPUMemoryMiB);
//   - a portion limit is read from the pod's own annotation, unrounded
//     (setGpuMemoryPortionLimitAnnotation);
//   - the compute portion is the received (rounded) portion, capped at 1
//     (resolveComputePortion, "the received portion is authoritative").

// binderReason is the text of KAI's binder's refusal of a received portion
// that does not parse above 0.
const binderReason = "invalid received gpu portion"

// receivedPortion is the portion KAI's binder receives for a requested
// portion p: Go's %.2f rounding of p (the decimal value of the float64,
// correctly rounded), read back as a float64 as the binder does.
func receivedPortion(p float64) (float64, string) {
	text := fmt.Sprintf("%.2f", p)
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, text
	}
	return v, text
}

// binderRefusal is KAI's binder's refusal of a portion that rounds to
// 0.00, nil for one it accepts.
func binderRefusal(p float64) *Error {
	v, text := receivedPortion(p)
	if v > 0 {
		return nil
	}
	return refusal(AnnotationFraction, strconv.FormatFloat(p, 'f', -1, 64), fmt.Sprintf(
		"KAI's binder refuses this pod: %s %q (KAI's scheduler hands the binder the portion as fmt.Sprintf(\"%%.2f\"), and a portion below 0.005 becomes 0.00); ask at least 0.005",
		binderReason, text))
}

// binderMiB is uint64(usable * v) for usable MiB of a GPU, as KAI's binder
// truncates it: the float64 product converted toward zero.
func binderMiB(usable int64, v float64) int64 {
	if usable <= 0 || v <= 0 {
		return 0
	}
	return int64(uint64(float64(usable) * v))
}

// memoryPortion is the portion KAI's scheduler assigns a memory request
// of memMiB on a GPU of totalMiB (node_info getGpuMemoryFractionalOnNode:
// the exact fraction rounded up to hundredths), as the binder receives it.
func memoryPortion(memMiB, totalMiB int64) float64 {
	if memMiB <= 0 || totalMiB <= 0 {
		return 0
	}
	v, _ := receivedPortion(math.Ceil(float64(memMiB)/float64(totalMiB)*100) / 100)
	return v
}

// roundUpMiB is mb MiB rounded up to the step, in bytes.
func roundUpMiB(mb int64, step resource.Quantity) int64 {
	v := mb * mib
	if s := step.Value(); s > 0 && v%s != 0 {
		v = (v/s + 1) * s
	}
	return v
}
