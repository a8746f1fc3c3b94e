// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// This file transcribes KAI-Scheduler's admission of a new pod by a user:
// the nvfractions admission plugin's Mutate (pkg/admission/.../nvfractions:
// GetFractionContainerRef, then gpu-memory rewritten as an NvFractions
// request), then its Validate on the mutated pod (the binder-owned
// annotation check, then resources.ValidateGPUFractionRequest). KAI stops at
// the first refusal; so does this. The rule order follows KAI's code, and
// docs/design/kai.md names the KAI function each step comes from. Where KAI ranges
// over a map (random order), the keys are taken sorted, which only changes
// which of several refusals is reported, never whether the pod is refused.

type fractionKind int

const (
	kindNone        fractionKind = iota
	kindNvFractions              // nvidia.com/container.<c>.gpu-memory.request (or .limit)
	kindPortion                  // gpu-fraction
	kindMemory                   // gpu-memory on a pod KAI's mutation did not rewrite
)

// request is the one fractional GPU request KAI admits per pod.
type request struct {
	kind      fractionKind
	container string
	// portion is gpu-fraction (kindPortion).
	portion float64
	// memory is the NvFractions request or gpu-memory (other kinds).
	memory resource.Quantity
	limit  *resource.Quantity
	// portionLimit is kai.scheduler/container.<c>.gpu-memory.portion.limit.
	portionLimit float64
	count        int64
	// mode is the container's gpu-compute.mode ("" when not set).
	mode string
	// compute is the container's gpu-compute.request (0 when not set).
	compute float64
}

// nvContainer is what the NvFractions annotations say about one container
// (KAI's NvFractionsContainerRequest).
type nvContainer struct {
	request, limit *resource.Quantity
	mode           *string
	compute        *float64
	firstKey       string
}

func refusal(key, value, rule string) *Error {
	return &Error{Annotation: key, Value: value, Rule: rule}
}

// admit returns the pod's request, nil for a pod with no fractional request
// (KAI admits it and there is nothing to translate), or KAI's refusal.
func admit(pod *corev1.Pod) (*request, *Error) {
	a := maps.Clone(pod.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	container, err := mutate(pod, a)
	if err != nil {
		return nil, err
	}
	req, err := admitMutated(pod, a, container)
	if err != nil && container != "" && err.Annotation == PrefixNvFractions+container+SuffixMemoryRequest {
		if v, ok := pod.Annotations[AnnotationMemory]; ok {
			// KAI's mutation wrote that key from gpu-memory: the
			// refusal names what the user wrote.
			err.Annotation, err.Value = AnnotationMemory, v
		}
	}
	return req, err
}

// admitMutated is admit after KAI's mutation wrote a: its Validate.
func admitMutated(pod *corev1.Pod, a map[string]string, container string) (*request, *Error) {
	if err := refuseBinderOwned(pod, a); err != nil {
		return nil, err
	}

	portionLimit, err := checkPortionLimit(pod, a)
	if err != nil {
		return nil, err
	}
	req, err := parseRequest(a)
	if err != nil {
		return nil, err
	}
	if req == nil {
		if v, ok := a[AnnotationNumDevices]; ok {
			return nil, refusal(AnnotationNumDevices, v, "cannot request multiple fractional devices without specifying fraction details (portion or memory)")
		}
		return nil, nil
	}
	req.portionLimit = portionLimit

	nv, err := nvFractionsData(a)
	if err != nil {
		return nil, err
	}
	if req.kind == kindNvFractions {
		if err := checkNvFractions(pod, a, nv); err != nil {
			return nil, err
		}
	}
	if err := checkConflicts(pod, a, req); err != nil {
		return nil, err
	}
	if err := completeRequest(req, container, nv); err != nil {
		return nil, err
	}
	return req, nil
}

// mutate is KAI's mutation, run only for pods with containers that request
// a fraction: it returns the container the fraction is for ("" for none)
// and writes a gpu-memory request into a as that container's NvFractions
// memory request.
func mutate(pod *corev1.Pod, a map[string]string) (string, *Error) {
	if len(pod.Spec.Containers) > 0 && requestsFraction(a) {
		name, err := fractionContainer(pod, a)
		if err != nil {
			return "", err
		}
		if v, ok := a[AnnotationMemory]; ok {
			mib, perr := strconv.ParseUint(v, 10, 64)
			if perr != nil {
				return "", refusal(AnnotationMemory, v, "failed to parse gpu memory annotation value: must be a whole number of MiB")
			}
			q, berr := mibQuantity(mib)
			if berr != nil {
				return "", refusal(AnnotationMemory, v, berr.Error())
			}
			a[PrefixNvFractions+name+SuffixMemoryRequest] = q.String()
		}
		return name, nil
	}
	return "", nil
}

// refuseBinderOwned refuses a pod that carries an annotation only KAI's
// binder may write (the first in key order, as KAI reports it), and
// removes such keys from a otherwise.
func refuseBinderOwned(pod *corev1.Pod, a map[string]string) *Error {
	// Binder-owned annotations may only be written by KAI's binder.
	for _, k := range sortedKeys(a) {
		if !binderOwned(k) {
			continue
		}
		name, err := nvContainerName(a)
		if err != nil {
			return err
		}
		if !hasContainer(pod, name) {
			return refusal(k, a[k], fmt.Sprintf("container %s not found in pod spec, but a fractional annotation referencing it was found", name))
		}
		suffix := SuffixDevices
		if strings.HasSuffix(k, SuffixComputePortion) {
			suffix = SuffixComputePortion
		}
		return refusal(k, a[k], suffix+" annotations may only be modified by KAI's binder service account, which writes them at bind time")
	}
	for k := range a {
		if binderOwned(k) {
			delete(a, k)
		}
	}
	return nil
}

// checkConflicts refuses the requests KAI refuses in combination: a GPU
// fraction beside whole GPUs, a container limit beside a fraction or
// memory annotation, both a fraction and memory, NvFractions memory that
// disagrees with the gpu-memory annotation.
func checkConflicts(pod *corev1.Pod, a map[string]string, req *request) *Error {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range list {
			if _, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
				return refusal("", "", fmt.Sprintf("container %s: cannot have both GPU fraction request and whole GPU resource request/limit (nvidia.com/gpu)", c.Name))
			}
		}
	}
	fraction, memory := a[AnnotationFraction], a[AnnotationMemory]
	if req.limit != nil && (fraction != "" || memory != "") {
		k := limitKey(a)
		return refusal(k, a[k], "cannot combine nvidia.com/container. limit annotation with gpu-fraction or gpu-memory annotation")
	}
	if fraction != "" && memory != "" {
		return refusal(AnnotationMemory, memory, "cannot request both gpu-fraction and GPU memory request")
	}
	if req.kind == kindNvFractions && memory != "" {
		if mib, perr := strconv.ParseUint(memory, 10, 64); perr == nil && mib > 0 {
			if q, berr := mibQuantity(mib); berr == nil && req.memory.Cmp(q) != 0 {
				return refusal(AnnotationMemory, memory, fmt.Sprintf("NvFractions memory request (%s) does not match gpu-memory annotation value (%d MiB)", req.memory.String(), mib))
			}
		}
	}
	return nil
}

// completeRequest sets what req takes from the fraction's container and
// the NvFractions data: the container, its mode and the first compute
// portion in container name order.
func completeRequest(req *request, container string, nv map[string]*nvContainer) *Error {
	if container == "" {
		return refusal("", "", "the pod has no containers")
	}
	req.container = container
	if d := nv[container]; d != nil {
		if d.mode != nil {
			req.mode = *d.mode
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nv)) {
		if c := nv[name].compute; c != nil && req.compute == 0 {
			req.compute = *c
		}
	}
	return nil
}

// requestsFraction is KAI's RequestsGPUFraction: the keys whose presence
// makes KAI's mutation run.
func requestsFraction(a map[string]string) bool {
	if _, ok := a[AnnotationFraction]; ok {
		return true
	}
	if _, ok := a[AnnotationMemory]; ok {
		return true
	}
	for k := range a {
		if strings.HasPrefix(k, PrefixNvFractions) && (strings.HasSuffix(k, SuffixMemoryRequest) || strings.HasSuffix(k, SuffixMemoryLimit)) {
			return true
		}
	}
	return false
}

// nvSuffixes in the order KAI's parseNvFractionsAnnotationKey tries them.
var nvSuffixes = []string{SuffixMemoryRequest, SuffixMemoryLimit, SuffixDevices, SuffixComputeMode, SuffixComputePortion, SuffixComputeRequest}

// parseNvKey splits an NvFractions key into its container and suffix.
func parseNvKey(k, v string) (string, string, *Error) {
	rest := strings.TrimPrefix(k, PrefixNvFractions)
	for _, s := range nvSuffixes {
		if strings.HasSuffix(k, s) {
			name := strings.TrimSuffix(rest, s)
			if name == "" {
				break
			}
			return name, s, nil
		}
	}
	return "", "", refusal(k, v, "invalid NvFractions annotation key (want nvidia.com/container.<container>.gpu-memory.request, .gpu-memory.limit, .gpu-compute.mode or .gpu-compute.request)")
}

// nvContainerName is KAI's GetNvFractionsContainerName: the one container
// every nvidia.com/container.* key names.
func nvContainerName(a map[string]string) (string, *Error) {
	name := ""
	for _, k := range sortedKeys(a) {
		if !strings.HasPrefix(k, PrefixNvFractions) {
			continue
		}
		c, _, err := parseNvKey(k, a[k])
		if err != nil {
			return "", err
		}
		if name != "" && name != c {
			return "", refusal(k, a[k], "currently, kai doesn't support multiple containers with fractional GPU requests")
		}
		name = c
	}
	return name, nil
}

// fractionContainer is KAI's GetFractionContainerRef.
func fractionContainer(pod *corev1.Pod, a map[string]string) (string, *Error) {
	named, found := a[AnnotationContainerName]
	nvName, err := nvContainerName(a)
	if err != nil {
		return "", err
	}
	if found && nvName != "" && named != nvName {
		return "", refusal(AnnotationContainerName, named, fmt.Sprintf("gpu-fraction-container-name annotation value %s does not match container name %s", named, nvName))
	}
	switch {
	case nvName != "":
		if !hasContainer(pod, nvName) {
			return "", refusal(firstKeyOf(a, nvName), a[firstKeyOf(a, nvName)], fmt.Sprintf("container with name %s not found for fraction request", nvName))
		}
		return nvName, nil
	case found:
		if !hasContainer(pod, named) {
			return "", refusal(AnnotationContainerName, named, fmt.Sprintf("container with name %s not found for fraction request", named))
		}
		return named, nil
	}
	return pod.Spec.Containers[0].Name, nil
}

func binderOwned(k string) bool {
	return strings.HasPrefix(k, PrefixNvFractions) && (strings.HasSuffix(k, SuffixDevices) || strings.HasSuffix(k, SuffixComputePortion))
}

// checkPortionLimit is KAI's validateGpuMemoryPortionLimitAnnotation; it
// returns the portion limit (0 when absent).
func checkPortionLimit(pod *corev1.Pod, a map[string]string) (float64, *Error) {
	key := ""
	for _, k := range sortedKeys(a) {
		if strings.HasPrefix(k, PrefixKAI) && strings.HasSuffix(k, SuffixPortionLimit) {
			key = k
			break
		}
	}
	if key == "" {
		return 0, nil
	}
	raw := a[key]
	container := strings.TrimSuffix(strings.TrimPrefix(key, PrefixKAI), SuffixPortionLimit)
	fraction := a[AnnotationFraction]
	if fraction == "" {
		return 0, refusal(key, raw, "can only be used together with the gpu-fraction annotation")
	}
	if named, ok := a[AnnotationContainerName]; ok {
		if named != container {
			return 0, refusal(AnnotationContainerName, named, fmt.Sprintf("does not match container name %s in %s annotation", container, key))
		}
	} else if len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].Name != container {
		return 0, refusal(key, raw, fmt.Sprintf("container name %s does not match the gpu-fraction target container", container))
	}
	f, err := strconv.ParseFloat(fraction, 64)
	if err != nil {
		return 0, refusal(AnnotationFraction, fraction, "gpu-fraction annotation value must be a positive number smaller than 1.0")
	}
	if _, decimals, ok := strings.Cut(raw, "."); ok && len(decimals) > 5 {
		return 0, refusal(key, raw, "must have at most 5 digits after the decimal point")
	}
	p, err := strconv.ParseFloat(raw, 64)
	if err != nil || p <= 0 || p >= 1 {
		return 0, refusal(key, raw, "must be a positive number smaller than 1.0")
	}
	if p <= f {
		return 0, refusal(key, raw, fmt.Sprintf("value (%s) must be greater than gpu-fraction annotation value (%s)", raw, fraction))
	}
	if math.IsNaN(p) {
		// KAI lets NaN through (every comparison is false); its binder then
		// computes a limit from it. Deliberate difference: refused.
		return 0, refusal(key, raw, "gpufrac: not a number")
	}
	return p, nil
}

// parseRequest is KAI's ParsePodGPUFractionRequest.
func parseRequest(a map[string]string) (*request, *Error) {
	count := int64(1)
	if v, ok := a[AnnotationNumDevices]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return nil, refusal(AnnotationNumDevices, v, "fraction count annotation value must be a positive integer greater than 0")
		}
		count = n
	}
	nv, err := nvFractionsData(a)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(nv)) {
		if d := nv[name]; d.request != nil {
			return &request{kind: kindNvFractions, memory: *d.request, limit: d.limit, count: count}, nil
		}
	}
	if v := a[AnnotationFraction]; v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || p <= 0 || p >= 1 || math.IsNaN(p) {
			return nil, refusal(AnnotationFraction, v, "gpu-fraction annotation value must be a positive number smaller than 1.0")
		}
		return &request{kind: kindPortion, portion: p, count: count}, nil
	}
	if v := a[AnnotationMemory]; v != "" {
		mib, err := strconv.ParseUint(v, 10, 64)
		if err != nil || mib == 0 {
			return nil, refusal(AnnotationMemory, v, "gpu-memory annotation value must be a positive integer greater than 0")
		}
		q, berr := mibQuantity(mib)
		if berr != nil {
			return nil, refusal(AnnotationMemory, v, berr.Error())
		}
		return &request{kind: kindMemory, memory: q, count: count}, nil
	}
	return nil, nil
}

// nvFractionsData is KAI's ExtractNvFractionsData (binder-owned keys
// already removed).
func nvFractionsData(a map[string]string) (map[string]*nvContainer, *Error) {
	out := map[string]*nvContainer{}
	for _, k := range sortedKeys(a) {
		if !strings.HasPrefix(k, PrefixNvFractions) {
			continue
		}
		v := a[k]
		name, suffix, err := parseNvKey(k, v)
		if err != nil {
			return nil, err
		}
		d := out[name]
		if d == nil {
			d = &nvContainer{firstKey: k}
			out[name] = d
		}
		switch suffix {
		case SuffixComputeMode:
			if v != "time-slicing" && v != "sm-sharing" {
				return nil, refusal(k, v, "invalid NvFractions compute mode (want time-slicing or sm-sharing)")
			}
			d.mode = &v
		case SuffixComputeRequest:
			c, perr := strconv.ParseFloat(v, 64)
			if perr != nil || math.IsNaN(c) || c <= 0 || c > 1 {
				return nil, refusal(k, v, "annotation value must be a positive number no greater than 1.0")
			}
			d.compute = &c
		case SuffixMemoryRequest, SuffixMemoryLimit:
			q, perr := v1alpha1.ParseQuantity(v) // bounded: see its comment
			if unbounded := new(v1alpha1.UnboundedQuantityError); errors.As(perr, &unbounded) {
				return nil, refusal(k, v, "gpufrac: "+perr.Error())
			}
			if perr != nil || q.Sign() <= 0 {
				return nil, refusal(k, v, "annotation value must be a valid Kubernetes memory quantity greater than 0")
			}
			if suffix == SuffixMemoryRequest {
				d.request = &q
			} else {
				d.limit = &q
			}
			if d.request == nil && d.limit != nil {
				d.request = ptrTo(d.limit.DeepCopy())
			}
		}
	}
	// KAI defaults the request from the limit as it reads each key, and a
	// later request key replaces that default: the effect is "the request if
	// given, else the limit", which the sorted order above also yields only
	// when the request key sorts after the limit key, so settle it here.
	for name, d := range out {
		if k := PrefixNvFractions + name + SuffixMemoryRequest; a[k] != "" {
			if q, err := v1alpha1.ParseQuantity(a[k]); err == nil {
				d.request = &q
			}
		}
	}
	return out, nil
}

// checkNvFractions is KAI's validateNvFractionsAnnotations.
func checkNvFractions(pod *corev1.Pod, a map[string]string, nv map[string]*nvContainer) *Error {
	names := slices.Sorted(maps.Keys(nv))
	for _, name := range names {
		d := nv[name]
		if !hasContainer(pod, name) {
			return refusal(d.firstKey, a[d.firstKey], fmt.Sprintf("container %s not found in pod spec, but a fractional annotation referencing it was found", name))
		}
		if d.request != nil && d.limit != nil && d.request.Cmp(*d.limit) > 0 {
			k := PrefixNvFractions + name + SuffixMemoryLimit
			return refusal(k, a[k], fmt.Sprintf("invalid fraction request for container %s: request is greater than limit", name))
		}
	}
	if len(names) > 1 {
		d := nv[names[1]]
		return refusal(d.firstKey, a[d.firstKey], "currently, kai doesn't support multiple containers with fractional GPU requests")
	}
	if named, ok := a[AnnotationContainerName]; ok {
		for _, name := range names {
			if named != name {
				return refusal(AnnotationContainerName, named, fmt.Sprintf("gpu-fraction-container-name annotation value %s does not match container name %s", named, name))
			}
		}
	}
	return nil
}

// maxMiB bounds MiB values before they become bytes: above it, MiB<<20
// overflows int64. No GPU comes near it; gpufrac refuses such values where
// KAI would carry them on (a deliberate difference, docs/design/kai.md).
const maxMiB = math.MaxInt64 >> 20

func mibQuantity(mib uint64) (resource.Quantity, error) {
	if mib > maxMiB {
		return resource.Quantity{}, fmt.Errorf("gpufrac: must be at most %d MiB (more overflows a count of bytes); no GPU comes near it", uint64(maxMiB))
	}
	return *resource.NewQuantity(int64(mib)<<20, resource.BinarySI), nil
}

func limitKey(a map[string]string) string {
	for _, k := range sortedKeys(a) {
		if strings.HasPrefix(k, PrefixNvFractions) && strings.HasSuffix(k, SuffixMemoryLimit) {
			return k
		}
	}
	return ""
}

func firstKeyOf(a map[string]string, container string) string {
	for _, k := range sortedKeys(a) {
		if strings.HasPrefix(k, PrefixNvFractions+container+".") {
			return k
		}
	}
	return ""
}

func sortedKeys(a map[string]string) []string { return slices.Sorted(maps.Keys(a)) }

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

func ptrTo[T any](v T) *T { return &v }
