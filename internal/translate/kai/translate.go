// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// Options are the cluster facts a translation depends on.
type Options struct {
	// GPUMemorySizes are the distinct `memory` capacities of the gpufrac
	// GPUs in the cluster; portions of a GPU become one alternative per size.
	GPUMemorySizes []resource.Quantity
	// GPUTotalsMiB maps a size in GPUMemorySizes (its bytes) to the GPU's
	// total memory in MiB, the slice attribute memoryTotalMiB (what KAI's
	// binder reads from the node label nvidia.com/gpu.memory). A size
	// without an entry stands for its own total.
	GPUTotalsMiB map[int64]int64
	// Class names for each compute mode (defaults: the shipped classes).
	TimeSlicingClass, SMSharingClass string
	// ReservedMiB is KAI's binder reservedGpuMemoryMiB: held back from each
	// GPU before a portion becomes MiB (default 0, as KAI's plugin when the
	// argument is not set).
	ReservedMiB int64
	// MemoryStep is the capacity step gpufrac's ResourceSlices publish;
	// requests round up to it (default 256Mi). Only used to say where
	// gpufrac's allocation differs from KAI's figure.
	MemoryStep resource.Quantity
	// MemoryMin is the smallest request the slices' requestPolicy allows
	// (default 1Gi); the API server rounds a smaller one up to it. Only
	// used to say what the API server allocates.
	MemoryMin resource.Quantity
	// MaxGPUsPerNode is the most gpufrac GPUs one node has; 0 when unknown.
	// A device count above it can never be satisfied and is refused.
	MaxGPUsPerNode int
	// KAISchedulerNames are the schedulerName values that hand a pod to
	// KAI (default: kai-scheduler); translated pods are moved off them.
	KAISchedulerNames []string
	// SchedulerName replaces them (default: default-scheduler).
	SchedulerName string
}

func (o *Options) defaults() {
	if o.TimeSlicingClass == "" {
		o.TimeSlicingClass = "gpufrac.dev"
	}
	if o.SMSharingClass == "" {
		o.SMSharingClass = "sm-sharing.gpufrac.dev"
	}
	if o.MemoryStep.IsZero() {
		o.MemoryStep = resource.MustParse("256Mi")
	}
	if o.MemoryMin.IsZero() {
		o.MemoryMin = resource.MustParse("1Gi")
	}
	if o.KAISchedulerNames == nil {
		o.KAISchedulerNames = []string{"kai-scheduler"}
	}
	if o.SchedulerName == "" {
		o.SchedulerName = corev1.DefaultSchedulerName
	}
}

// gpuSize is one GPU size: the capacity claims draw from (and select on)
// and the total KAI's binder computes from.
type gpuSize struct {
	capacity resource.Quantity
	totalMiB int64
}

// gpuSizes are the sizes of o, smaller capacities first (the cheaper fit).
func (o *Options) gpuSizes() []gpuSize {
	out := make([]gpuSize, 0, len(o.GPUMemorySizes))
	for _, c := range o.GPUMemorySizes {
		total, ok := o.GPUTotalsMiB[c.Value()]
		if !ok || total <= 0 {
			total = c.Value() / mib
		}
		out = append(out, gpuSize{capacity: c, totalMiB: total})
	}
	slices.SortFunc(out, func(a, b gpuSize) int { return a.capacity.Cmp(b.capacity) })
	return out
}

// Result is what a pod needs.
type Result struct {
	// Pod is a copy of the input with the claim added, the KAI scheduler
	// name replaced and the translation recorded.
	Pod *corev1.Pod
	// Template is to exist in the pod's namespace; gpufrac-controller
	// creates it from the pod (TemplateFor). Equal parameters give equal
	// names, so pods share it.
	Template *resourceapi.ResourceClaimTemplate
	// Warnings say what of KAI's behaviour gpufrac does not reproduce for
	// this pod and what it changed beyond the claim.
	Warnings []string
}

// RequestName is the request of every translated claim.
const RequestName = "gpu"

// Inputs are the facts a template was computed from, recorded on the pod.
type Inputs struct {
	GPUMemorySizes []resource.Quantity `json:"gpuMemorySizes,omitempty"`
	// GPUTotalsMiB are the totals of GPUMemorySizes, in the same order.
	GPUTotalsMiB []int64           `json:"gpuMemoryTotalsMiB,omitempty"`
	ReservedMiB  int64             `json:"reservedMiB,omitempty"`
	MemoryStep   resource.Quantity `json:"memoryStep"`
}

// inputsOf is what a translation with opts records.
func inputsOf(opts Options) Inputs {
	in := Inputs{GPUMemorySizes: opts.GPUMemorySizes, ReservedMiB: opts.ReservedMiB, MemoryStep: opts.MemoryStep}
	for _, size := range opts.GPUMemorySizes {
		if t, ok := opts.GPUTotalsMiB[size.Value()]; ok {
			in.GPUTotalsMiB = append(in.GPUTotalsMiB, t)
		}
	}
	if len(in.GPUTotalsMiB) != len(in.GPUMemorySizes) {
		in.GPUTotalsMiB = nil // every size its own total
	}
	return in
}

// apply sets the recorded facts on opts.
func (in Inputs) apply(opts *Options) {
	opts.GPUMemorySizes, opts.ReservedMiB, opts.MemoryStep = in.GPUMemorySizes, in.ReservedMiB, in.MemoryStep
	opts.GPUTotalsMiB = nil
	if len(in.GPUTotalsMiB) == len(in.GPUMemorySizes) && len(in.GPUTotalsMiB) > 0 {
		opts.GPUTotalsMiB = map[int64]int64{}
		for i, size := range in.GPUMemorySizes {
			opts.GPUTotalsMiB[size.Value()] = in.GPUTotalsMiB[i]
		}
	}
}

// decodeInputs reads recorded inputs with every quantity's text bounded
// before it is parsed (v1alpha1.ParseQuantity): json.Unmarshal into a
// resource.Quantity would parse "1E-999999999" for minutes.
func decodeInputs(raw string) (Inputs, error) {
	var text struct {
		GPUMemorySizes []string `json:"gpuMemorySizes"`
		GPUTotalsMiB   []int64  `json:"gpuMemoryTotalsMiB"`
		ReservedMiB    int64    `json:"reservedMiB"`
		MemoryStep     string   `json:"memoryStep"`
	}
	if err := json.Unmarshal([]byte(raw), &text); err != nil {
		return Inputs{}, err
	}
	if len(text.GPUMemorySizes) > resourceapi.FirstAvailableDeviceRequestMaxSize {
		return Inputs{}, fmt.Errorf("gpuMemorySizes: %d sizes, at most %d (resource.k8s.io/v1 FirstAvailableDeviceRequestMaxSize)", len(text.GPUMemorySizes), resourceapi.FirstAvailableDeviceRequestMaxSize)
	}
	in := Inputs{ReservedMiB: text.ReservedMiB, GPUTotalsMiB: text.GPUTotalsMiB}
	for i, s := range text.GPUMemorySizes {
		q, err := v1alpha1.ParseQuantity(s)
		if err != nil {
			return Inputs{}, fmt.Errorf("gpuMemorySizes[%d]: %q: %w", i, s, err)
		}
		in.GPUMemorySizes = append(in.GPUMemorySizes, q)
	}
	if text.MemoryStep != "" {
		q, err := v1alpha1.ParseQuantity(text.MemoryStep)
		if err != nil {
			return Inputs{}, fmt.Errorf("memoryStep: %q: %w", text.MemoryStep, err)
		}
		in.MemoryStep = q
	}
	return in, in.validate()
}

// validate bounds recorded inputs: at most 8 GPU sizes (a claim's
// firstAvailable holds at most resource.k8s.io/v1
// FirstAvailableDeviceRequestMaxSize alternatives, documented), each from
// 1Mi to 1Pi, with its GPU's total from the size to 1Pi where totals are
// recorded; a reserve from 0 to 1Pi in MiB; a memory step from 1 byte to
// 1Gi.
func (in Inputs) validate() error {
	if len(in.GPUMemorySizes) > resourceapi.FirstAvailableDeviceRequestMaxSize {
		return fmt.Errorf("gpuMemorySizes: %d sizes, at most %d (resource.k8s.io/v1 FirstAvailableDeviceRequestMaxSize)", len(in.GPUMemorySizes), resourceapi.FirstAvailableDeviceRequestMaxSize)
	}
	lo, hi := resource.MustParse("1Mi"), resource.MustParse("1Pi")
	for i, q := range in.GPUMemorySizes {
		if q.Cmp(lo) < 0 || q.Cmp(hi) > 0 {
			return fmt.Errorf("gpuMemorySizes[%d]: %s: must be from 1Mi to 1Pi", i, q.String())
		}
	}
	if n := len(in.GPUTotalsMiB); n != 0 && n != len(in.GPUMemorySizes) {
		return fmt.Errorf("gpuMemoryTotalsMiB: %d totals for %d sizes: want one per size", n, len(in.GPUMemorySizes))
	}
	for i, t := range in.GPUTotalsMiB {
		// A capacity is the total less the node's MPS server reserve,
		// never more than the total (DESIGN.md, "What a slice's memory
		// means").
		if c := in.GPUMemorySizes[i]; t > MaxReservedMiB || t*mib < c.Value() {
			return fmt.Errorf("gpuMemoryTotalsMiB[%d]: %d: must be from the size %s to %d MiB (1Pi)", i, t, c.String(), int64(MaxReservedMiB))
		}
	}
	if err := ValidateReservedMiB(in.ReservedMiB); err != nil {
		return err
	}
	if step := in.MemoryStep; !step.IsZero() && (step.Sign() < 0 || step.Cmp(resource.MustParse("1Gi")) > 0) {
		return fmt.Errorf("memoryStep: %s: must be from 1 byte to 1Gi", step.String())
	}
	return nil
}

// MaxReservedMiB is the largest reserve: 1Pi in MiB, the largest GPU size
// the translation takes.
const MaxReservedMiB = 1 << 30

// ValidateReservedMiB is the one rule for KAI's reservedGpuMemoryMiB: the
// controller's flag, the webhook (Translate) and the template loop
// (TemplateFor, through the inputs recorded on the pod) all apply it, so
// the webhook never admits a pod whose template the loop would refuse to
// create.
func ValidateReservedMiB(mib int64) error {
	if mib < 0 || mib > MaxReservedMiB {
		return fmt.Errorf("reservedMiB: %d: must be from 0 to %d MiB (1Pi)", mib, int64(MaxReservedMiB))
	}
	return nil
}

// Translate returns nil, nil for a pod with nothing to translate (no KAI
// fractional request, or translated already), and Errors for a pod KAI
// refuses or no GPU in the cluster can satisfy.
func Translate(pod *corev1.Pod, opts Options) (*Result, error) {
	if !HasAnnotations(pod.Annotations) || translatedAlready(pod) {
		return nil, nil
	}
	opts.defaults()
	if err := ValidateReservedMiB(opts.ReservedMiB); err != nil {
		return nil, Errors{{Rule: "gpufrac: --kai-reserved-gpu-memory-mib: " + err.Error()}}
	}
	req, kerr := admit(pod)
	if kerr != nil {
		return nil, Errors{*kerr}
	}
	if req == nil {
		return nil, nil
	}
	if err := checkBounds(pod, req, opts); err != nil {
		return nil, Errors{*err}
	}
	tmpl, warnings, err := build(pod, req, opts)
	if err != nil {
		return nil, err
	}
	out := &Result{Pod: pod.DeepCopy(), Template: tmpl, Warnings: warnings}
	p := out.Pod
	claimName := translated.PodClaimName("gpufrac-", req.container)
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claimName, ResourceClaimTemplateName: ptr.To(tmpl.Name)})
	translated.ForContainer(p, req.container, func(c *corev1.Container) {
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: claimName})
		out.Warnings = append(out.Warnings, translated.StripNVIDIAEnv(c)...)
	})
	if slices.Contains(opts.KAISchedulerNames, p.Spec.SchedulerName) {
		out.Warnings = append(out.Warnings, fmt.Sprintf("schedulerName %s replaced by %s: gpufrac's claim is placed by the Kubernetes scheduler, and KAI must not act on the pod too", p.Spec.SchedulerName, opts.SchedulerName))
		p.Spec.SchedulerName = opts.SchedulerName
	}
	inputs, err := json.Marshal(inputsOf(opts))
	if err != nil {
		return nil, fmt.Errorf("recording the translation inputs: %w", err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationTranslated] = tmpl.Name
	p.Annotations[AnnotationInputs] = string(inputs)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[LabelTranslated] = "true"
	return out, nil
}

// TemplateFor recomputes the template a translated pod names, from the KAI
// annotations and the inputs recorded on it; opts supplies the class names
// (the controller's own). It fails when the pod is not translated or the
// recomputed name differs from the recorded one.
func TemplateFor(pod *corev1.Pod, opts Options) (*resourceapi.ResourceClaimTemplate, error) {
	name := pod.Annotations[AnnotationTranslated]
	raw, ok := pod.Annotations[AnnotationInputs]
	if name == "" || !ok {
		return nil, fmt.Errorf("pod %s/%s is not translated", pod.Namespace, pod.Name)
	}
	in, err := decodeInputs(raw)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, AnnotationInputs, err)
	}
	// Anyone who may create a pod may write these inputs: decodeInputs
	// holds them to what the webhook itself could have recorded.
	in.apply(&opts)
	opts.defaults()
	req, kerr := admit(pod)
	if kerr != nil {
		return nil, Errors{*kerr}
	}
	if req == nil {
		return nil, fmt.Errorf("pod %s/%s: its annotations no longer request a GPU fraction", pod.Namespace, pod.Name)
	}
	// A pod can carry the label and annotations without having passed the
	// webhook (a namespace it does not serve): the bounds hold here too.
	if err := checkBounds(pod, req, opts); err != nil {
		return nil, Errors{*err}
	}
	tmpl, _, err := build(pod, req, opts)
	if err != nil {
		return nil, err
	}
	if tmpl.Name != name {
		return nil, fmt.Errorf("pod %s/%s names template %s, but its annotations give %s here (different class names?)", pod.Namespace, pod.Name, name, tmpl.Name)
	}
	return tmpl, nil
}

// translatedAlready: the pod carries the claim a translation added (a
// reinvoked webhook sees its own output). A pod that only claims to be
// translated, by setting the annotation itself, is translated anyway.
func translatedAlready(pod *corev1.Pod) bool {
	name := pod.Annotations[AnnotationTranslated]
	if name == "" {
		return false
	}
	for _, c := range pod.Spec.ResourceClaims {
		if c.ResourceClaimTemplateName != nil && *c.ResourceClaimTemplateName == name {
			return true
		}
	}
	return false
}

// checkBounds refuses what KAI accepts but no GPU in the cluster can ever
// satisfy (the one deliberate difference in what is admitted). Every bound
// names the annotation, its value and where the bound comes from.
func checkBounds(pod *corev1.Pod, req *request, opts Options) *Error {
	if req.kind == kindPortion && len(opts.GPUMemorySizes) == 0 {
		return refusal(AnnotationFraction, pod.Annotations[AnnotationFraction], "gpufrac: the cluster has no gpufrac GPUs, so a portion cannot be turned into memory")
	}
	if req.kind == kindPortion {
		// KAI admits the pod and its binder then refuses it at every
		// bind: refused here at once, with the binder's reason.
		if e := binderRefusal(req.portion); e != nil {
			e.Value = pod.Annotations[AnnotationFraction]
			return e
		}
	}

	if bound, source := v1alpha1.MaxDevices(opts.MaxGPUsPerNode); req.count > int64(bound) {
		return refusal(AnnotationNumDevices, pod.Annotations[AnnotationNumDevices], fmt.Sprintf("gpufrac: must be at most %d, %s", bound, source))
	}
	largest, source := v1alpha1.LargestGPU(opts.GPUMemorySizes)
	check := func(q resource.Quantity, key string) *Error {
		if q.Cmp(largest) > 0 {
			return refusal(key, pod.Annotations[key], fmt.Sprintf("gpufrac: %s must be at most %s, the largest GPU %s", q.String(), largest.String(), source))
		}
		return nil
	}
	if req.kind == kindNvFractions || req.kind == kindMemory {
		key := PrefixNvFractions + req.container + SuffixMemoryRequest
		if _, ok := pod.Annotations[key]; !ok {
			key = PrefixNvFractions + req.container + SuffixMemoryLimit
		}
		if _, ok := pod.Annotations[AnnotationMemory]; ok {
			key = AnnotationMemory
		}
		if err := check(req.memory, key); err != nil {
			return err
		}
	}
	if req.limit != nil {
		if err := check(*req.limit, PrefixNvFractions+req.container+SuffixMemoryLimit); err != nil {
			return err
		}
	}
	if v, ok := pod.Annotations[AnnotationSharingMode]; ok && req.mode == "" && v != "time-slicing" && v != "sm-sharing" {
		return refusal(AnnotationSharingMode, v, "gpufrac: must be time-slicing or sm-sharing (KAI's code does not read this key; gpufrac reads it as the default compute mode)")
	}
	return nil
}

// modeOf is the compute mode of the claim: the container's
// gpu-compute.mode, else gpufrac's reading of the pod-wide key, else
// time-slicing (KAI's default).
func modeOf(pod *corev1.Pod, req *request) string {
	if req.mode != "" {
		return req.mode
	}
	if v := pod.Annotations[AnnotationSharingMode]; v == "sm-sharing" {
		return v
	}
	return "time-slicing"
}

func lower(q resource.Quantity) string { return strings.ToLower(q.String()) }
