// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hami

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// GPU is one kind of gpufrac GPU in the cluster: NVML's total memory
// (the slice attribute memoryTotalMiB, what HAMi's device plugin registers
// as the device's memory) and the memory capacity its slice offers
// (the total less the node's MPS server reserve, rounded down to the step).
type GPU struct {
	TotalMiB int64             `json:"totalMiB"`
	Capacity resource.Quantity `json:"capacity"`
}

// Options are the cluster facts a translation depends on.
type Options struct {
	// GPUs are the distinct kinds of type=gpu devices that publish
	// memoryTotalMiB.
	GPUs []GPU
	// Class every claim names (default gpufrac.dev, TimeSlicing).
	Class string
	// MemoryStep and MemoryMin are the slices' request policy (defaults:
	// gpufrac's 256Mi and 1Gi); used to say what the API server allocates.
	MemoryStep, MemoryMin resource.Quantity
	// MaxGPUsPerNode is the most gpufrac GPUs one node has; 0 when unknown.
	MaxGPUsPerNode int
	// HAMiSchedulerNames hand a pod to HAMi (default: hami-scheduler);
	// translated pods are moved off them.
	HAMiSchedulerNames []string
	// SchedulerName replaces them (default: default-scheduler).
	SchedulerName string
}

func (o *Options) defaults() {
	if o.Class == "" {
		o.Class = v1alpha1.DriverName
	}
	if o.MemoryStep.IsZero() {
		o.MemoryStep = domain.MemoryStep.DeepCopy()
	}
	if o.MemoryMin.IsZero() {
		o.MemoryMin = domain.MemoryMin.DeepCopy()
	}
	if o.HAMiSchedulerNames == nil {
		o.HAMiSchedulerNames = []string{"hami-scheduler"}
	}
	if o.SchedulerName == "" {
		o.SchedulerName = corev1.DefaultSchedulerName
	}
}

// Annotations and labels gpufrac writes on the pods it translates.
const (
	// AnnotationTemplates maps each container to the template of its claim
	// (JSON object).
	AnnotationTemplates = "gpufrac.dev/hami-templates"
	// AnnotationInputs records the GPUs the templates were computed from.
	AnnotationInputs = "gpufrac.dev/hami-inputs"
	// AnnotationResources records what was removed from each container's
	// requests and limits (JSON: container -> {limits, requests}).
	AnnotationResources = "gpufrac.dev/hami-resources"
	// LabelTranslated selects translated pods for the controller's informer.
	LabelTranslated = "gpufrac.dev/hami-translated"
	// AnnotationRounding on a template says what the API server allocates
	// where that differs from HAMi's figure.
	AnnotationRounding = "gpufrac.dev/hami-rounding"
	// AnnotationCompute on a template says what became of gpucores.
	AnnotationCompute = "gpufrac.dev/hami-compute"
)

// Result is what a pod needs.
type Result struct {
	// Pod is a copy of the input with the claims added, HAMi's resources
	// removed, the scheduler name replaced and the translation recorded.
	Pod *corev1.Pod
	// Templates are to exist in the pod's namespace, one per container
	// that gets GPUs; gpufrac-controller creates them from the pod
	// (TemplatesFor).
	Templates []*resourceapi.ResourceClaimTemplate
	Warnings  []string
}

// removed is what a translation took out of one container.
type removed struct {
	Limits   corev1.ResourceList `json:"limits,omitempty"`
	Requests corev1.ResourceList `json:"requests,omitempty"`
}

type inputs struct {
	GPUs []GPU `json:"gpus,omitempty"`
}

// Translate returns nil, nil for a pod with nothing to translate (no HAMi
// resource, another scheduler's pod, a pod labelled hami.io/webhook=ignore,
// or translated already), and Errors for a pod HAMi refuses or gpufrac
// cannot serve.
func Translate(pod *corev1.Pod, opts Options) (*Result, error) {
	if !HasResources(pod) || pod.Labels[LabelWebhookIgnore] == "ignore" || pod.Annotations[AnnotationTemplates] != "" {
		return nil, nil
	}
	opts.defaults()
	if !forHAMi(pod, opts) {
		return nil, nil
	}
	if err := validateGPUs(opts.GPUs); err != nil {
		return nil, Errors{{Rule: "gpufrac: " + err.Error()}}
	}
	reqs, herr := admit(pod)
	if herr != nil {
		return nil, Errors{*herr}
	}
	if len(reqs) == 0 {
		// Counts of 0 alone: HAMi allocates nothing, and neither does a
		// device plugin; the pod is left as written.
		return nil, nil
	}
	if err := podRefusal(pod); err != nil {
		return nil, Errors{*err}
	}
	out := &Result{Pod: pod.DeepCopy()}
	p := out.Pod
	names := map[string]string{}
	for i := range reqs {
		tmpl, warnings, err := build(pod.Namespace, &reqs[i], opts)
		if err != nil {
			return nil, err
		}
		out.Templates = append(out.Templates, tmpl)
		out.Warnings = append(out.Warnings, warnings...)
		names[reqs[i].container] = tmpl.Name
		claimName := translated.PodClaimName("gpufrac-hami-", reqs[i].container)
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claimName, ResourceClaimTemplateName: &tmpl.Name})
		translated.ForContainer(p, reqs[i].container, func(c *corev1.Container) {
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: claimName})
			out.Warnings = append(out.Warnings, translated.StripNVIDIAEnv(c)...)
		})
	}
	stripped := strip(p)
	if slices.Contains(opts.HAMiSchedulerNames, p.Spec.SchedulerName) {
		out.Warnings = append(out.Warnings, fmt.Sprintf("schedulerName %s replaced by %s: gpufrac's claim is placed by the Kubernetes scheduler, and HAMi must not act on the pod too", p.Spec.SchedulerName, opts.SchedulerName))
		p.Spec.SchedulerName = opts.SchedulerName
	}
	if err := record(p, names, stripped, opts.GPUs); err != nil {
		return nil, err
	}
	return out, nil
}

// record writes the translation onto the pod.
func record(p *corev1.Pod, names map[string]string, stripped map[string]removed, gpus []GPU) error {
	templates, err := json.Marshal(names)
	if err != nil {
		return fmt.Errorf("recording the templates: %w", err)
	}
	res, err := json.Marshal(stripped)
	if err != nil {
		return fmt.Errorf("recording the removed resources: %w", err)
	}
	in, err := json.Marshal(inputs{GPUs: gpus})
	if err != nil {
		return fmt.Errorf("recording the translation inputs: %w", err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationTemplates] = string(templates)
	p.Annotations[AnnotationResources] = string(res)
	p.Annotations[AnnotationInputs] = string(in)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[LabelTranslated] = "true"
	return nil
}

// strip removes HAMi's resources from every container's requests and
// limits, returning what it removed per container.
func strip(p *corev1.Pod) map[string]removed {
	out := map[string]removed{}
	translated.EachContainer(p, func(c *corev1.Container) {
		var r removed
		for _, name := range Resources {
			if q, ok := c.Resources.Limits[name]; ok {
				r.Limits = setQ(r.Limits, name, q)
				delete(c.Resources.Limits, name)
			}
			if q, ok := c.Resources.Requests[name]; ok {
				r.Requests = setQ(r.Requests, name, q)
				delete(c.Resources.Requests, name)
			}
		}
		if r.Limits != nil || r.Requests != nil {
			out[c.Name] = r
		}
	})
	return out
}

func setQ(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) corev1.ResourceList {
	if l == nil {
		l = corev1.ResourceList{}
	}
	l[name] = q
	return l
}

// TemplatesFor recomputes the templates a translated pod names from the
// resources and inputs recorded on it; opts supplies the class (the
// controller's own). It fails when the pod is not translated or a
// recomputed name differs from the recorded one.
func TemplatesFor(pod *corev1.Pod, opts Options) ([]*resourceapi.ResourceClaimTemplate, error) {
	rawNames, rawRes, rawIn := pod.Annotations[AnnotationTemplates], pod.Annotations[AnnotationResources], pod.Annotations[AnnotationInputs]
	if rawNames == "" || rawRes == "" {
		return nil, fmt.Errorf("pod %s/%s is not translated", pod.Namespace, pod.Name)
	}
	var names map[string]string
	var res map[string]removed
	var in inputs
	// Anyone who may create a pod may write these: what is decoded is held
	// to what the webhook itself could have recorded.
	for key, dst := range map[string]any{AnnotationTemplates: &names, AnnotationResources: &res} {
		if err := json.Unmarshal([]byte(pod.Annotations[key]), dst); err != nil {
			return nil, fmt.Errorf("pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, key, err)
		}
	}
	if rawIn != "" {
		if err := json.Unmarshal([]byte(rawIn), &in); err != nil {
			return nil, fmt.Errorf("pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, AnnotationInputs, err)
		}
	}
	opts.GPUs = in.GPUs
	opts.defaults()
	if err := validateGPUs(opts.GPUs); err != nil {
		return nil, fmt.Errorf("pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, AnnotationInputs, err)
	}
	restored := pod.DeepCopy()
	restore(restored, res)
	reqs, herr := admit(restored)
	if herr != nil {
		return nil, Errors{*herr}
	}
	var out []*resourceapi.ResourceClaimTemplate
	for i := range reqs {
		tmpl, _, err := build(pod.Namespace, &reqs[i], opts)
		if err != nil {
			return nil, err
		}
		if want := names[reqs[i].container]; tmpl.Name != want {
			return nil, fmt.Errorf("pod %s/%s names template %q for container %s, but its recorded resources give %s here (different class?)", pod.Namespace, pod.Name, want, reqs[i].container, tmpl.Name)
		}
		out = append(out, tmpl)
	}
	if len(out) != len(names) {
		return nil, fmt.Errorf("pod %s/%s names %d templates, its recorded resources give %d", pod.Namespace, pod.Name, len(names), len(out))
	}
	return out, nil
}

// TemplateNames lists the templates a translated pod names.
func TemplateNames(pod *corev1.Pod) []string {
	var names map[string]string
	if json.Unmarshal([]byte(pod.Annotations[AnnotationTemplates]), &names) != nil {
		return nil
	}
	return slices.Sorted(maps.Values(names))
}

// restore puts the recorded resources back on the containers.
func restore(p *corev1.Pod, res map[string]removed) {
	translated.EachContainer(p, func(c *corev1.Container) {
		r, ok := res[c.Name]
		if !ok {
			return
		}
		for name, q := range r.Limits {
			if slices.Contains(Resources, name) {
				c.Resources.Limits = setQ(c.Resources.Limits, name, q)
			}
		}
		for name, q := range r.Requests {
			if slices.Contains(Resources, name) {
				c.Resources.Requests = setQ(c.Resources.Requests, name, q)
			}
		}
	})
}

// validateGPUs bounds recorded or observed GPU kinds: at most 8 (a claim's
// firstAvailable holds at most resource.k8s.io/v1
// FirstAvailableDeviceRequestMaxSize alternatives), each total from 1 MiB
// to 1Pi, its capacity from 1Mi to the total.
func validateGPUs(gpus []GPU) error {
	if len(gpus) > resourceapi.FirstAvailableDeviceRequestMaxSize {
		return fmt.Errorf("gpus: %d kinds of GPU, at most %d (resource.k8s.io/v1 FirstAvailableDeviceRequestMaxSize)", len(gpus), resourceapi.FirstAvailableDeviceRequestMaxSize)
	}
	for i, g := range gpus {
		if g.TotalMiB < 1 || g.TotalMiB > 1<<30 {
			return fmt.Errorf("gpus[%d].totalMiB: %d: must be from 1 to %d (1Pi)", i, g.TotalMiB, 1<<30)
		}
		if g.Capacity.Cmp(resource.MustParse("1Mi")) < 0 || g.Capacity.Value() > g.TotalMiB*mib {
			return fmt.Errorf("gpus[%d].capacity: %s: must be from 1Mi to the GPU's total, %d MiB", i, g.Capacity.String(), g.TotalMiB)
		}
	}
	return nil
}
