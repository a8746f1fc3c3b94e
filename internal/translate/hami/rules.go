// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hami translates HAMi's GPU-sharing resources (nvidia.com/gpu with
// nvidia.com/gpumem, gpumem-percentage and gpucores) into DRA claims for
// gpufrac: a pure function from a Pod (and the GPUs in the cluster) to the
// ResourceClaimTemplates it needs and the changes to the Pod that use them.
//
// What is accepted, refused and how memory is computed is HAMi's own code,
// transcribed in this file (docs/hami.md pins the commit and cites the
// function behind each rule, and lists the deliberate differences).
package hami

import (
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// HAMi's resource names: its chart's defaults (charts/hami/values.yaml
// resourceName, resourceMem, resourceMemPercentage, resourceCores,
// resourcePriority), which its device config passes to NvidiaConfig.
const (
	ResourceCount            corev1.ResourceName = "nvidia.com/gpu"
	ResourceMemory           corev1.ResourceName = "nvidia.com/gpumem"
	ResourceMemoryPercentage corev1.ResourceName = "nvidia.com/gpumem-percentage"
	ResourceCores            corev1.ResourceName = "nvidia.com/gpucores"
	ResourcePriority         corev1.ResourceName = "nvidia.com/priority"
)

// Resources are the names a translation removes from every container's
// requests and limits: left there, the NVIDIA device plugin (or gpufrac's
// nvidia.com/gpu DeviceClass) would allocate a second GPU, and no node
// advertises the others, so the pod would never schedule.
var Resources = []corev1.ResourceName{ResourceCount, ResourceMemory, ResourceMemoryPercentage, ResourceCores, ResourcePriority}

// HAMi's defaults (charts/hami/templates/scheduler/device-configmap.yaml:
// defaultMemory 0, defaultCores 0, defaultGPUNum 1, memoryFactor 1).
const (
	DefaultMemory = 0
	DefaultCores  = 0
	DefaultGPUNum = 1
)

// HAMi's pod annotations that constrain which GPU a pod gets
// (pkg/device/nvidia/device.go constants). gpufrac does not translate them
// into selectors, so a pod carrying one is refused rather than placed on a
// GPU it excluded.
var placementAnnotations = []string{
	"nvidia.com/use-gputype", "nvidia.com/nouse-gputype",
	"nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid", "nvidia.com/vgpu-mode",
}

// LabelWebhookIgnore on a pod (value "ignore") keeps HAMi's webhook away
// (charts/hami/templates/scheduler/webhook.yaml objectSelector); gpufrac's
// honours it too.
const LabelWebhookIgnore = "hami.io/webhook"

// request is one container's ask, as HAMi's scheduler records it
// (device.ContainerDeviceRequest from GenerateResourceRequests).
type request struct {
	container string
	count     int64
	memMiB    int64 // Memreq; 0: unset
	percent   int64 // MemPercentagereq; 101: unset
	cores     int64 // Coresreq, clamped to 100 as Fit does
}

// exclusive: HAMi's Fit refuses a device already in use for Coresreq 100,
// and places nothing with Coresreq 0 on a device whose cores are full:
// the container holds the GPU alone.
func (r *request) exclusive() bool { return r.cores >= 100 }

// Error is a pod HAMi (or gpufrac's bounds) refuses: the container and
// resource, and the rule.
type Error struct {
	Container, Resource string
	Rule                string
}

func (e Error) Error() string {
	if e.Container == "" {
		return e.Rule
	}
	where := "container " + safetext.Cap(e.Container, 128)
	if e.Resource != "" {
		where += " " + e.Resource
	}
	return where + ": " + e.Rule
}

// Errors keeps HAMi's first refusal, as its webhook stops there.
type Errors []Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return "cannot translate HAMi GPU resources: " + strings.Join(msgs, "; ")
}

// HasResources reports whether any container names one of HAMi's resources
// in its requests or limits.
func HasResources(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, name := range Resources {
				if present(&list[i], name) {
					return true
				}
			}
		}
	}
	return false
}

// forHAMi is HAMi webhook's Handle gate: a pod with another scheduler is
// left alone ("pod already has different scheduler assigned"); "" and
// default-scheduler (--force-overwrite-default-scheduler, default true)
// and HAMi's own names are handled.
func forHAMi(pod *corev1.Pod, opts Options) bool {
	s := pod.Spec.SchedulerName
	return s == "" || s == corev1.DefaultSchedulerName || slices.Contains(opts.HAMiSchedulerNames, s)
}

// admit applies HAMi's webhook (scheduler/webhook.go Handle, nvidia
// MutateAdmission) and scheduler (GenerateResourceRequests, Fit) rules to
// the pod: the requests of the containers that get GPUs, init containers
// first as HAMi processes them, or HAMi's refusal.
func admit(pod *corev1.Pod) ([]request, *Error) {
	var reqs []request
	hasResource := false
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			r, found, err := admitContainer(&list[i])
			if err != nil {
				return nil, err
			}
			hasResource = hasResource || found
			if r != nil {
				reqs = append(reqs, *r)
			}
		}
	}
	if !hasResource {
		return nil, nil
	}
	// Handle: "container %s is privileged" for any privileged container of
	// a pod that has a GPU resource.
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
				return nil, &Error{Rule: fmt.Sprintf("container %s is privileged", c.Name)}
			}
		}
	}
	// Handle, with a scheduler name configured (the chart's hami-scheduler).
	if pod.Spec.NodeName != "" {
		return nil, &Error{Rule: "pod has node assigned"}
	}
	return reqs, nil
}

// admitContainer is MutateAdmission then GenerateResourceRequests and Fit's
// clamp for one container. found is MutateAdmission's hasResource; the
// request is nil where HAMi's scheduler would allocate nothing (a count of 0).
func admitContainer(c *corev1.Container) (*request, bool, *Error) {
	// validateMemoryPercentage.
	if pct, ok := value(c, ResourceMemoryPercentage); ok && (pct < 0 || pct > 100) {
		return nil, false, &Error{Container: c.Name, Resource: string(ResourceMemoryPercentage),
			Rule: fmt.Sprintf("invalid %s value %d in container %s: must be an integer between 0 and 100", ResourceMemoryPercentage, pct, c.Name)}
	}
	// mutateContainerResource: a memory, percentage or cores limit without a
	// count gets defaultGPUNum (limits only, as HAMi reads them there).
	count, hasCount := c.Resources.Limits[ResourceCount]
	found := hasCount
	if !hasCount {
		_, m := c.Resources.Limits[ResourceMemory]
		_, p := c.Resources.Limits[ResourceMemoryPercentage]
		_, k := c.Resources.Limits[ResourceCores]
		if (m || p || k) && DefaultGPUNum > 0 {
			count, hasCount, found = *resource.NewQuantity(DefaultGPUNum, resource.BinarySI), true, true
		}
	}
	if !hasCount {
		count, hasCount = c.Resources.Requests[ResourceCount]
	}
	if !hasCount {
		return nil, found, nil
	}
	found = true
	n, ok := count.AsInt64()
	if !ok || n < 0 {
		return nil, found, &Error{Container: c.Name, Resource: string(ResourceCount),
			Rule: fmt.Sprintf("%s is not a whole number HAMi's scheduler reads (GenerateResourceRequests: AsInt64); HAMi would allocate nothing", count.String())}
	}
	if n == 0 {
		return nil, found, nil
	}
	r := &request{container: c.Name, count: n, percent: 101, cores: DefaultCores}
	if q, ok := quantity(c, ResourceMemory); ok {
		m, parsed := q.AsInt64()
		if !parsed || m < 0 || m > math.MaxInt32 {
			return nil, found, &Error{Container: c.Name, Resource: string(ResourceMemory),
				Rule: fmt.Sprintf("%s: nvidia memory request is not a plain integer within the int32 range (GenerateResourceRequests rejects it; HAMi's scheduler would allocate nothing)", q.String())}
		}
		r.memMiB = m
	}
	if q, ok := quantity(c, ResourceMemoryPercentage); ok {
		if p, parsed := q.AsInt64(); parsed && p > 0 {
			r.percent = min(p, 100)
		}
	}
	if r.percent == 101 && r.memMiB == 0 {
		if DefaultMemory != 0 {
			r.memMiB = DefaultMemory
		} else {
			r.percent = 100
		}
	}
	if q, ok := quantity(c, ResourceCores); ok {
		if k, parsed := q.AsInt64(); parsed {
			r.cores = k
		}
	} else if exclusiveByDefault(c) {
		// defaultExclusiveCoreIfNeeded: gpucores 100 when no memory is
		// named, or the percentage is 100.
		r.cores = 100
	}
	r.cores = min(r.cores, 100) // Fit: "core limit can't exceed 100"
	return r, found, nil
}

// exclusiveByDefault is defaultExclusiveCoreIfNeeded's condition, for a
// container that has a count and no gpucores.
func exclusiveByDefault(c *corev1.Container) bool {
	if pct, ok := value(c, ResourceMemoryPercentage); ok {
		return pct == 100
	}
	_, ok := value(c, ResourceMemory)
	return !ok
}

// memoryOn is Fit's memory for a device of totalMiB: the MiB asked, else
// the percentage of the device's memory (int arithmetic, a floor).
func (r *request) memoryOn(totalMiB int64) int64 {
	if r.memMiB > 0 {
		return r.memMiB
	}
	if r.percent != 101 {
		return totalMiB * r.percent / 100
	}
	return 0
}

// value is HAMi's resourceValue: limits first, then requests.
func value(c *corev1.Container, name corev1.ResourceName) (int64, bool) {
	q, ok := quantity(c, name)
	if !ok {
		return 0, false
	}
	return q.Value(), true
}

func quantity(c *corev1.Container, name corev1.ResourceName) (resource.Quantity, bool) {
	if q, ok := c.Resources.Limits[name]; ok {
		return q, true
	}
	q, ok := c.Resources.Requests[name]
	return q, ok
}

func present(c *corev1.Container, name corev1.ResourceName) bool {
	_, ok := quantity(c, name)
	return ok
}

// podRefusal is gpufrac's refusal of a pod HAMi would handle but gpufrac
// cannot translate faithfully: KAI annotations too (two dialects, two
// claims), or HAMi's placement annotations.
func podRefusal(pod *corev1.Pod) *Error {
	if kai.HasAnnotations(pod.Annotations) {
		return &Error{Rule: "gpufrac: the pod carries KAI-Scheduler GPU-sharing annotations and HAMi resources; one request language per pod (either would allocate a GPU)"}
	}
	for _, a := range placementAnnotations {
		if v, ok := pod.Annotations[a]; ok {
			return &Error{Rule: fmt.Sprintf("gpufrac: annotation %s=%q: HAMi's GPU type and UUID constraints are not translated; write a ResourceClaimTemplate with a selector on gpufrac.dev/productName or uuid instead", a, safetext.Cap(v, 128))}
		}
	}
	return nil
}
