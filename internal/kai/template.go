// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

const mib = int64(1) << 20

// share is what one GPU size alternative holds.
type share struct {
	size    resource.Quantity // zero: any GPU (an exact request)
	memory  resource.Quantity
	limit   *resource.Quantity
	percent int32 // SM cap; 0 = none
	kaiMiB  int64 // what KAI's binder computes, when it differs by size
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
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("hashing a claim template: %w", err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "gpufrac-kai-" + shortHash(raw, 12),
			Namespace: pod.Namespace,
			Labels:    map[string]string{LabelManagedBy: ManagedByValue},
		},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec},
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
		sizes := slices.Clone(opts.GPUMemorySizes)
		// Smaller GPUs first: the cheaper fit.
		slices.SortFunc(sizes, func(a, b resource.Quantity) int { return a.Cmp(b) })
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
			return nil, Errors{noSizeFits(pod, req, sizes)}
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
// for a multi-GPU ask. rounding notes the shares gpufrac allocates more
// memory for than KAI would (opts.MemoryStep).
func claimSpec(shares []share, req *request, class string, opts Options) (spec resourceapi.ResourceClaimSpec, rounding []string) {
	dreq := resourceapi.DeviceRequest{Name: RequestName}
	step := opts.MemoryStep.Value()
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
		if v := s.memory.Value(); step > 0 && v%step != 0 {
			rounding = append(rounding, fmt.Sprintf("%s: KAI %s, gpufrac allocates %s (%s step)",
				target, s.memory.String(), resource.NewQuantity((v/step+1)*step, resource.BinarySI).String(), opts.MemoryStep.String()))
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
// (nvfractions plugin: usableGPUMemoryMiB, setNvFractionsMemoryAnnotation,
// setGpuMemoryPortionLimitAnnotation, resolveComputePortion); ok is false
// when the request cannot fit that size.
func shareOn(size resource.Quantity, req *request, opts Options, mode string) (share, bool, error) {
	sizeMiB := size.Value() / mib
	usable := float64(sizeMiB - opts.ReservedMiB)
	if usable <= 0 {
		return share{}, false, Errors{{Rule: fmt.Sprintf("gpufrac: the reserve of %d MiB leaves nothing of a %s GPU", opts.ReservedMiB, size.String())}}
	}
	s := share{size: size, memory: req.memory, limit: req.limit}
	if req.kind == kindPortion {
		m := int64(usable * req.portion) // KAI: uint64(usable * portion), a floor
		if m == 0 {
			return share{}, false, nil
		}
		s.memory = *resource.NewQuantity(m*mib, resource.BinarySI)
		s.kaiMiB = m
	}
	if s.memory.Cmp(size) > 0 {
		return share{}, false, nil
	}
	if req.limit == nil && req.portionLimit > 0 {
		l := int64(usable * req.portionLimit)
		if l == 0 {
			return share{}, false, nil
		}
		s.limit = resource.NewQuantity(l*mib, resource.BinarySI)
		if s.limit.Cmp(s.memory) < 0 {
			// An NvFractions request with a portion limit below it on this
			// size: gpufrac never lets a limit fall below the request.
			return share{}, false, nil
		}
	}
	if mode == "sm-sharing" {
		switch {
		case req.compute > 0:
			s.percent = percentOf(req.compute)
		case req.kind == kindPortion:
			s.percent = percentOf(req.portion)
		default:
			s.percent = percentOf(math.Min(float64(s.memory.Value()/mib)/usable, 1))
		}
	}
	return s, true, nil
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

func shortHash(data []byte, n int) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:n]
}
