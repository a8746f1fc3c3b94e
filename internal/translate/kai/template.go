// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

const mib = int64(1) << 20

// share is what one GPU size alternative holds.
type share struct {
	size    resource.Quantity // zero: any GPU (an exact request)
	memory  resource.Quantity // what the claim asks
	limit   *resource.Quantity
	percent int32 // SM cap; 0 = none
	kaiMiB  int64 // what KAI's binder computes, when it depends on the size
	// whole: KAI's figure is more than the GPU's capacity, so the claim
	// asks the whole capacity.
	whole bool
}

// build turns an admitted request into the claim template.
func build(pod *corev1.Pod, req *request, opts Options) (*resourceapi.ResourceClaimTemplate, []string, error) {
	mode := modeOf(pod, req)
	class := opts.TimeSlicingClass
	if mode == "sm-sharing" {
		class = opts.SMSharingClass
	}
	shares, err := sharesFor(pod, req, opts, mode)
	if err != nil {
		return nil, nil, err
	}
	spec, rounding := claimSpec(shares, req, class, opts)
	tmpl, err := translated.ClaimTemplate("gpufrac-kai-", pod.Namespace, spec)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	if len(rounding) > 0 {
		tmpl.Annotations = map[string]string{AnnotationRounding: strings.Join(rounding, "; ")}
	}
	if mode == "time-slicing" {
		note := "KAI caps this container's SMs at its compute portion through its own MPS server; gpufrac holds no SM cap for a TimeSlicing share: on dmem nodes with MPS v3 daemons it is an MPS client of the daemon's main socket, whose per-UID server gpufrac gives no thread percentage, and elsewhere it runs without MPS: not enforced (use gpu-compute.mode: sm-sharing)"
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations[AnnotationComputeCap] = note
		if req.compute > 0 {
			k := PrefixNvFractions + req.container + SuffixComputeRequest
			warnings = append(warnings, fmt.Sprintf("annotation %s=%q: %s", k, pod.Annotations[k], note))
		}
	}
	return tmpl, warnings, nil
}

// sharesFor lists the shares the claim asks for: one per GPU size, smaller
// first, where the share depends on the GPU's size, else the one share of
// any GPU.
func sharesFor(pod *corev1.Pod, req *request, opts Options, mode string) ([]share, error) {
	// A portion, a portion limit, or an SM cap derived from memory depends
	// on the GPU's size: one alternative per size.
	perSize := req.kind == kindPortion || req.portionLimit > 0 || (mode == "sm-sharing" && req.compute == 0)
	var shares []share
	if perSize {
		if n := len(opts.GPUMemorySizes); n > resourceapi.FirstAvailableDeviceRequestMaxSize {
			return nil, Errors{{Rule: fmt.Sprintf("gpufrac: this request takes a share of each GPU size, the cluster publishes %d sizes, and a claim can name at most %d alternatives (resource.k8s.io/v1 FirstAvailableDeviceRequestMaxSize)", n, resourceapi.FirstAvailableDeviceRequestMaxSize)}}
		}
		sizes := opts.gpuSizes()
		for _, size := range sizes {
			s, ok, err := shareOn(size, req, opts, mode)
			if err != nil {
				return nil, err
			}
			if ok {
				shares = append(shares, s)
			}
		}
		if len(shares) == 0 {
			capacities := make([]resource.Quantity, len(sizes))
			for i := range sizes {
				capacities[i] = sizes[i].capacity
			}
			return nil, Errors{noSizeFits(pod, req, capacities)}
		}
	} else {
		s := share{memory: req.memory, limit: req.limit}
		if mode == "sm-sharing" {
			s.percent = percentOf(req.compute)
		}
		shares = []share{s}
	}
	return shares, nil
}

// claimSpec is the claim of shares: one request (with a subrequest per GPU
// size), a config per share with a limit or an SM cap, and distinct GPUs
// for a multi-GPU ask. rounding notes the shares where what the API server
// allocates differs from KAI's figure (roundingNote).
func claimSpec(shares []share, req *request, class string, opts Options) (spec resourceapi.ResourceClaimSpec, rounding []string) {
	dreq := resourceapi.DeviceRequest{Name: RequestName}
	for _, s := range shares {
		capacity := &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": s.memory}}
		target := RequestName
		if s.size.IsZero() {
			dreq.Exactly = &resourceapi.ExactDeviceRequest{
				DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: req.count, Capacity: capacity,
			}
		} else {
			sub := resourceapi.DeviceSubRequest{
				Name: "size-" + lower(s.size), DeviceClassName: class,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: req.count,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.capacity["gpufrac.dev"].memory.compareTo(quantity(%q)) == 0`, s.size.String()),
				}}},
				Capacity: capacity,
			}
			dreq.FirstAvailable = append(dreq.FirstAvailable, sub)
			target = RequestName + "/" + sub.Name
		}
		if s.limit != nil || s.percent > 0 {
			spec.Devices.Config = append(spec.Devices.Config, fractionConfig(target, s.limit, s.percent))
		}
		if note := roundingNote(target, s, opts); note != "" {
			rounding = append(rounding, note)
		}
	}
	spec.Devices.Requests = []resourceapi.DeviceRequest{dreq}
	if req.count > 1 {
		// A multi-allocatable GPU could otherwise be picked twice for one
		// request; shares of a multi-GPU ask must land on distinct GPUs.
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{
			Requests: []string{RequestName}, DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(v1alpha1.DriverName + "/uuid")),
		}}
	}
	return spec, rounding
}

// roundingNote says, for one alternative, what the API server allocates
// (the slice's requestPolicy: min and step) where that differs from what
// KAI's binder gives, and how much less than KAI the whole capacity is
// where KAI's figure does not fit; "" where they agree.
func roundingNote(target string, s share, opts Options) string {
	got := translated.Allocated(s.memory, opts.MemoryMin, opts.MemoryStep)
	policy := fmt.Sprintf("min %s, step %s", opts.MemoryMin.String(), opts.MemoryStep.String())
	if s.kaiMiB == 0 {
		if got.Cmp(s.memory) == 0 {
			return ""
		}
		return fmt.Sprintf("%s: KAI %s, the API server allocates %s (%s)", target, s.memory.String(), got.String(), policy)
	}
	kai := resource.NewQuantity(s.kaiMiB*mib, resource.BinarySI)
	if s.whole {
		return fmt.Sprintf("%s: KAI %s, more than this GPU's capacity %s: the claim asks the whole capacity, %dMi less than KAI",
			target, kai.String(), s.size.String(), s.kaiMiB-s.size.Value()/mib)
	}
	if got.Cmp(*kai) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: KAI %s, the API server allocates %s (%s)", target, kai.String(), got.String(), policy)
}

// noSizeFits names the annotation that makes the request fit no size.
func noSizeFits(pod *corev1.Pod, req *request, sizes []resource.Quantity) Error {
	names := make([]string, len(sizes))
	for i := range sizes {
		names[i] = sizes[i].String()
	}
	rule := fmt.Sprintf("gpufrac: no GPU size the cluster publishes (%s) can hold this request: a share must be at least 1 MiB, at most the GPU, and its limit not below it", strings.Join(names, ", "))
	key := AnnotationFraction
	if req.kind != kindPortion {
		key = ""
		for _, k := range sortedKeys(pod.Annotations) {
			if strings.HasPrefix(k, PrefixKAI) && strings.HasSuffix(k, SuffixPortionLimit) {
				key = k
			}
		}
	}
	return Error{Annotation: key, Value: pod.Annotations[key], Rule: rule}
}

// shareOn computes the share on one GPU size as KAI's binder does
// (binder.go): the portion as the binder receives it (%.2f), times the
// GPU's total less KAI's reserve, rounded up to the step and at most the
// capacity; a portion limit from the unrounded annotation. ok is false
// when the request cannot fit that size.
func shareOn(size gpuSize, req *request, opts Options, mode string) (share, bool, error) {
	usable := size.totalMiB - opts.ReservedMiB
	if usable <= 0 {
		return share{}, false, Errors{{Rule: fmt.Sprintf("gpufrac: KAI's reserve of %d MiB (--kai-reserved-gpu-memory-mib) leaves nothing of a %d MiB GPU (KAI's binder: reserved gpu memory leaves no allocatable memory)", opts.ReservedMiB, size.totalMiB)}}
	}
	s := share{size: size.capacity, memory: req.memory, limit: req.limit}
	if req.kind == kindPortion {
		v, _ := receivedPortion(req.portion)
		m := binderMiB(usable, v) // KAI: uint64(usable * portion), a floor
		if m == 0 {
			return share{}, false, nil // KAI: "calculated gpu memory request is zero"
		}
		s.kaiMiB = m
		s.memory = *resource.NewQuantity(roundUpMiB(m, opts.MemoryStep), resource.BinarySI)
		if s.memory.Cmp(size.capacity) > 0 {
			s.memory, s.whole = size.capacity.DeepCopy(), true
		}
	}
	if s.memory.Cmp(size.capacity) > 0 {
		return share{}, false, nil
	}
	if req.limit == nil && req.portionLimit > 0 {
		l := binderMiB(usable, req.portionLimit) // unrounded, as KAI reads it
		if l == 0 || (s.kaiMiB > 0 && l < s.kaiMiB) || (s.kaiMiB == 0 && l*mib < s.memory.Value()) {
			// A limit below the request on this size: gpufrac never lets
			// a limit fall below the request.
			return share{}, false, nil
		}
		// Never below what the claim asks (the step can lift it above
		// KAI's figure), never above the GPU's capacity.
		lq := resource.NewQuantity(min(max(l*mib, s.memory.Value()), size.capacity.Value()), resource.BinarySI)
		s.limit = lq
	}
	if mode == "sm-sharing" {
		s.percent = percentOf(computePortion(req, size))
	}
	return s, true, nil
}

// computePortion is the compute portion KAI hands the container on a GPU
// of size (zero size: unknown, for exact requests): gpu-compute.request
// when set (KAI's later line carries it unrounded to the binder, which
// reads it first; docs/design/kai.md), else the portion the binder
// received (resolveComputePortion): the gpu-fraction as %.2f, or for a
// memory request the scheduler's portion of the GPU's total, rounded up
// to hundredths. Capped at 1.
func computePortion(req *request, size gpuSize) float64 {
	switch {
	case req.compute > 0:
		return req.compute
	case req.kind == kindPortion:
		v, _ := receivedPortion(req.portion)
		return math.Min(v, 1)
	case size.totalMiB > 0:
		return math.Min(memoryPortion(ceilMiB(req.memory), size.totalMiB), 1)
	}
	return 0
}

// ceilMiB is q in whole MiB, rounded up.
func ceilMiB(q resource.Quantity) int64 {
	return (q.Value() + mib - 1) / mib
}

// percentOf is kai-gpu-fractioning's portion to CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:
// the nearest whole percent, never below 1 (0 would mean unlimited to MPS).
func percentOf(portion float64) int32 {
	if portion <= 0 {
		return 0
	}
	return int32(max(1, min(100, math.Round(portion*100))))
}

func fractionConfig(request string, limit *resource.Quantity, percent int32) resourceapi.DeviceClaimConfiguration {
	cfg := v1alpha1.FractionConfig{
		TypeMeta:    metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind},
		MemoryLimit: limit,
	}
	if percent > 0 {
		cfg.ComputeMode = v1alpha1.SMSharing
		cfg.ActiveThreadPercentage = ptr.To(percent)
	}
	raw, _ := json.Marshal(cfg)
	return resourceapi.DeviceClaimConfiguration{Requests: []string{request}, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{Raw: raw}},
	}}
}
