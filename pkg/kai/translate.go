package kai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// Options are the cluster facts a translation depends on.
type Options struct {
	// GPUMemorySizes are the distinct `memory` capacities of the gpufrac
	// GPUs in the cluster; portions of a GPU become one alternative per size.
	GPUMemorySizes []resource.Quantity
	// Class names for each compute mode (defaults: the shipped classes).
	TimeSlicingClass, SMSharingClass string
}

// Result is what a pod needs.
type Result struct {
	// Pod is a copy of the input with the claims added.
	Pod *corev1.Pod
	// Templates are to be created in the pod's namespace if absent; equal
	// parameters give equal names, so pods share them.
	Templates []*resourceapi.ResourceClaimTemplate
}

// RequestName is the request of every translated claim.
const RequestName = "gpu"

// LabelManagedBy marks templates this translator made.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// ManagedByValue is the value of LabelManagedBy.
const ManagedByValue = "gpufrac-controller"

// want is what one container asked for.
type want struct {
	container string
	legacy    bool
	// Exactly one of fraction and request is set.
	fraction float64
	request  *resource.Quantity
	limit    *resource.Quantity
	portion  float64
	mode     v1alpha1.ComputeMode
	count    int
	// broken: one of its annotations was refused; report nothing derived.
	broken bool
}

// Translate returns nil, nil for a pod with nothing to translate (no KAI
// annotations, or translated already).
func Translate(pod *corev1.Pod, opts Options) (*Result, error) {
	if !HasAnnotations(pod.Annotations) || pod.Annotations[AnnotationTranslated] != "" {
		return nil, nil
	}
	if opts.TimeSlicingClass == "" {
		opts.TimeSlicingClass = "gpufrac.dev"
	}
	if opts.SMSharingClass == "" {
		opts.SMSharingClass = "sm-sharing.gpufrac.dev"
	}
	wants, errs := parse(pod, opts)
	if len(errs) > 0 {
		return nil, errs
	}
	out := &Result{Pod: pod.DeepCopy()}
	var names []string
	for _, w := range wants {
		tmpl, err := template(pod.Namespace, w, opts)
		if err != nil {
			return nil, err
		}
		out.Templates = append(out.Templates, tmpl)
		names = append(names, tmpl.Name)
		claimName := podClaimName(w.container)
		out.Pod.Spec.ResourceClaims = append(out.Pod.Spec.ResourceClaims, corev1.PodResourceClaim{
			Name: claimName, ResourceClaimTemplateName: ptr.To(tmpl.Name),
		})
		addContainerClaim(out.Pod, w.container, claimName)
	}
	if out.Pod.Annotations == nil {
		out.Pod.Annotations = map[string]string{}
	}
	out.Pod.Annotations[AnnotationTranslated] = strings.Join(names, ",")
	return out, nil
}

func addContainerClaim(pod *corev1.Pod, container, claim string) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == container {
				list[i].Resources.Claims = append(list[i].Resources.Claims, corev1.ResourceClaim{Name: claim})
			}
		}
	}
}

// podClaimName is the pod-level claim name for a container: readable when it
// fits a DNS label, hashed when the container's name is too long.
func podClaimName(container string) string {
	name := "gpufrac-" + container
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(container))
	return "gpufrac-" + hex.EncodeToString(sum[:])[:16]
}

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

func parseMode(v string) (v1alpha1.ComputeMode, bool) {
	switch v {
	case "time-slicing":
		return v1alpha1.TimeSlicing, true
	case "sm-sharing":
		return v1alpha1.SMSharing, true
	}
	return "", false
}

const modeRule = "must be time-slicing or sm-sharing"

// parse reads every annotation into per-container wants, collecting every
// problem.
func parse(pod *corev1.Pod, opts Options) ([]want, Errors) {
	a := pod.Annotations
	var errs Errors
	bad := func(key, rule string) { errs = append(errs, Error{Annotation: key, Value: a[key], Rule: rule}) }

	podMode := v1alpha1.TimeSlicing
	if v, ok := a[AnnotationSharingMode]; ok {
		if m, ok := parseMode(v); ok {
			podMode = m
		} else {
			bad(AnnotationSharingMode, modeRule)
		}
	}

	wants := map[string]*want{}
	// Legacy, pod-level annotations: one container's claim.
	_, hasFraction := a[AnnotationFraction]
	_, hasMemory := a[AnnotationMemory]
	if hasFraction || hasMemory {
		container := ""
		if len(pod.Spec.Containers) > 0 {
			container = pod.Spec.Containers[0].Name
		}
		if v, ok := a[AnnotationContainerName]; ok {
			container = v
			if !hasContainer(pod, v) {
				bad(AnnotationContainerName, "the pod has no container of that name")
			}
		}
		w := &want{container: container, legacy: true, count: 1}
		switch {
		case hasFraction && hasMemory:
			bad(AnnotationMemory, "set gpu-fraction or gpu-memory, not both")
		case hasFraction:
			f, err := strconv.ParseFloat(a[AnnotationFraction], 64)
			if err != nil || !(f > 0 && f < 1) {
				bad(AnnotationFraction, "must be a number greater than 0 and less than 1 (a portion of one GPU)")
			} else if len(opts.GPUMemorySizes) == 0 {
				bad(AnnotationFraction, "the cluster has no gpufrac GPUs, so a portion cannot be turned into memory")
			}
			w.fraction = f
		default:
			mib, err := strconv.ParseInt(a[AnnotationMemory], 10, 64)
			if err != nil || mib <= 0 {
				bad(AnnotationMemory, "must be a positive whole number of MiB")
			}
			w.request = resource.NewQuantity(mib<<20, resource.BinarySI)
		}
		if v, ok := a[AnnotationNumDevices]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				bad(AnnotationNumDevices, "must be a positive whole number of GPUs")
			}
			w.count = max(n, 1)
		}
		wants[container] = w
	} else {
		if _, ok := a[AnnotationNumDevices]; ok {
			bad(AnnotationNumDevices, "needs gpu-fraction or gpu-memory beside it")
		}
		if _, ok := a[AnnotationContainerName]; ok {
			bad(AnnotationContainerName, "needs gpu-fraction or gpu-memory beside it")
		}
	}

	// Per-container annotations, in a stable order for stable messages.
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c, suffix, ok := containerAnnotation(k)
		if !ok || suffix == suffixDevices {
			continue
		}
		if !hasContainer(pod, c) {
			bad(k, fmt.Sprintf("the pod has no container %q", c))
			continue
		}
		w := wants[c]
		if w == nil {
			w = &want{container: c, count: 1}
			wants[c] = w
		} else if w.legacy {
			bad(k, fmt.Sprintf("container %q already gets a GPU from gpu-fraction or gpu-memory; use one scheme per container", c))
			continue
		}
		v := a[k]
		before := len(errs)
		switch suffix {
		case suffixMemoryRequest, suffixMemoryLimit:
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() <= 0 {
				bad(k, "must be a positive quantity such as 20Gi")
				w.broken = true
				continue
			}
			if suffix == suffixMemoryRequest {
				w.request = &q
			} else {
				w.limit = &q
			}
		case suffixComputeMode:
			if m, ok := parseMode(v); ok {
				w.mode = m
			} else {
				bad(k, modeRule)
			}
		case suffixPortionLimit:
			p, err := strconv.ParseFloat(v, 64)
			switch {
			case err != nil || !(p > 0 && p <= 1):
				bad(k, "must be a number greater than 0 and at most 1 (a portion of one GPU)")
			case len(opts.GPUMemorySizes) == 0:
				bad(k, "the cluster has no gpufrac GPUs, so a portion cannot be turned into memory")
			default:
				w.portion = p
			}
		}
		w.broken = w.broken || len(errs) > before
	}

	var out []want
	for _, c := range slices.Sorted(maps.Keys(wants)) {
		w := wants[c]
		if w.broken {
			continue
		}
		if w.mode == "" {
			w.mode = podMode
		}
		if !w.legacy {
			prefix := containerPrefixNvidia + c
			switch {
			case w.request == nil && w.limit != nil:
				// KAI: the request defaults to the limit.
				w.request = ptr.To(w.limit.DeepCopy())
			case w.request == nil && w.portion == 0:
				errs = append(errs, Error{Annotation: prefix + suffixComputeMode, Value: a[prefix+suffixComputeMode],
					Rule: fmt.Sprintf("container %q names a compute mode but no gpu-memory request or limit", c)})
				continue
			case w.request == nil:
				k := containerPrefixKAI + c + suffixPortionLimit
				errs = append(errs, Error{Annotation: k, Value: a[k], Rule: "a limit needs a request: add " + prefix + suffixMemoryRequest})
				continue
			}
			if w.limit != nil && w.limit.Cmp(*w.request) < 0 {
				errs = append(errs, Error{Annotation: prefix + suffixMemoryLimit, Value: a[prefix+suffixMemoryLimit],
					Rule: fmt.Sprintf("must not be below the request %s", w.request.String())})
			}
		}
		errs = append(errs, checkPortion(a, w, opts)...)
		out = append(out, *w)
	}
	return out, errs
}

// checkPortion refuses a portion limit below the request on some GPU size.
func checkPortion(a map[string]string, w *want, opts Options) Errors {
	if w.portion == 0 {
		return nil
	}
	k := containerPrefixKAI + w.container + suffixPortionLimit
	for _, size := range opts.GPUMemorySizes {
		limit := portionOf(w.portion, size)
		req := requestOn(w, size)
		if limit.Cmp(req) < 0 {
			return Errors{{Annotation: k, Value: a[k], Rule: fmt.Sprintf("on a %s GPU this is %s, below the request %s", size.String(), limit.String(), req.String())}}
		}
	}
	return nil
}

// portionOf is p of size, rounded up to a whole MiB.
func portionOf(p float64, size resource.Quantity) resource.Quantity {
	mib := int64(math.Ceil(p * float64(size.Value()) / (1 << 20)))
	return *resource.NewQuantity(mib<<20, resource.BinarySI)
}

func requestOn(w *want, size resource.Quantity) resource.Quantity {
	if w.request != nil {
		return *w.request
	}
	return portionOf(w.fraction, size)
}

// subrequestName names the alternative for one GPU size.
func subrequestName(size resource.Quantity) string {
	return "size-" + strings.ToLower(size.String())
}

// sizeSelector matches GPUs of exactly one memory size.
func sizeSelector(size resource.Quantity) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`device.capacity["gpufrac.dev"].memory.compareTo(quantity(%q)) == 0`, size.String()),
	}}
}

func fractionConfig(requests []string, limit resource.Quantity) resourceapi.DeviceClaimConfiguration {
	raw, _ := json.Marshal(v1alpha1.FractionConfig{
		TypeMeta:    metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.Kind},
		MemoryLimit: &limit,
	})
	return resourceapi.DeviceClaimConfiguration{Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{Raw: raw}},
	}}
}

// template builds the claim template for one container's want.
func template(namespace string, w want, opts Options) (*resourceapi.ResourceClaimTemplate, error) {
	class := opts.TimeSlicingClass
	if w.mode == v1alpha1.SMSharing {
		class = opts.SMSharingClass
	}
	var spec resourceapi.ResourceClaimSpec
	req := resourceapi.DeviceRequest{Name: RequestName}
	perSize := w.fraction > 0 || w.portion > 0
	if perSize {
		sizes := slices.Clone(opts.GPUMemorySizes)
		// Smaller GPUs first: a portion asks for a share of whatever GPU
		// it lands on, and the small ones are the cheaper fit.
		slices.SortFunc(sizes, func(a, b resource.Quantity) int { return a.Cmp(b) })
		for _, size := range sizes {
			sub := resourceapi.DeviceSubRequest{
				Name: subrequestName(size), DeviceClassName: class,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(w.count),
				Selectors: []resourceapi.DeviceSelector{sizeSelector(size)},
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					"memory": requestOn(&w, size)}},
			}
			req.FirstAvailable = append(req.FirstAvailable, sub)
			if w.portion > 0 {
				spec.Devices.Config = append(spec.Devices.Config, fractionConfig([]string{RequestName + "/" + sub.Name}, portionOf(w.portion, size)))
			}
		}
	} else {
		req.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(w.count),
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": *w.request}},
		}
	}
	if w.limit != nil {
		spec.Devices.Config = append(spec.Devices.Config, fractionConfig([]string{RequestName}, *w.limit))
	}
	spec.Devices.Requests = []resourceapi.DeviceRequest{req}
	if w.count > 1 {
		// A multi-allocatable GPU could otherwise be picked twice for one
		// request; shares of a multi-GPU ask must land on distinct GPUs.
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{
			Requests: []string{RequestName}, DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(v1alpha1.DriverName + "/uuid")),
		}}
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("hashing a claim template: %w", err)
	}
	sum := sha256.Sum256(raw)
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "gpufrac-kai-" + hex.EncodeToString(sum[:])[:12],
			Namespace: namespace,
			Labels:    map[string]string{LabelManagedBy: ManagedByValue},
		},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}, nil
}
