// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package simulate

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// AnnotationReplicas makes one Pod of a workload file stand for N.
const AnnotationReplicas = "gpufrac.dev/replicas"

// The bounds of a simulation are Kubernetes' own for one cluster: at most
// 5,000 nodes and 150,000 pods in total (documented: "Considerations for
// large clusters", kubernetes.io/docs/setup/best-practices/cluster-large).
// A simulation beyond them describes no cluster, and would run out of
// memory long before it said anything.
const (
	MaxNodes = 5000
	MaxPods  = 150000
)

// Load reads a workload: ResourceClaimTemplates, DeviceClasses and Pods in
// multi-document YAML. Pods reference templates by name; KAI-annotated Pods
// are translated with the controller's code for the given GPU sizes.
func Load(data []byte, sizes []resource.Quantity) ([]Pod, []*resourceapi.DeviceClass, error) {
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	var classes []*resourceapi.DeviceClass
	var pods []corev1.Pod
	doc := 0
	for raw, err := range yamldocs.All(data) {
		doc++
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", doc, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &meta); err != nil || meta.Kind == "" {
			continue
		}
		switch meta.Kind {
		case "ResourceClaimTemplate":
			var t resourceapi.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict(raw, &t); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", doc, err)
			}
			if err := positiveMemory(&t.Spec.Spec); err != nil {
				return nil, nil, fmt.Errorf("document %d: ResourceClaimTemplate %s: %w", doc, t.Name, err)
			}
			templates[t.Name] = &t
		case "DeviceClass":
			var c resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict(raw, &c); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", doc, err)
			}
			classes = append(classes, &c)
		case "Pod":
			var p corev1.Pod
			if err := yaml.UnmarshalStrict(raw, &p); err != nil {
				return nil, nil, fmt.Errorf("document %d: %w", doc, err)
			}
			pods = append(pods, p)
		}
	}
	var out []Pod
	for _, p := range pods {
		item := Pod{Name: p.Name, Replicas: 1}
		if v, ok := p.Annotations[AnnotationReplicas]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxPods {
				return nil, nil, fmt.Errorf("pod %s: annotation %s=%q: must be a number from 1 to %d (the most pods a Kubernetes cluster holds)", p.Name, AnnotationReplicas, v, MaxPods)
			}
			item.Replicas = n
		}
		translated, err := kai.Translate(&p, kai.Options{GPUMemorySizes: sizes})
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		if translated != nil {
			templates[translated.Template.Name] = translated.Template
			p = *translated.Pod
		}
		for _, rc := range p.Spec.ResourceClaims {
			if rc.ResourceClaimTemplateName == nil {
				return nil, nil, fmt.Errorf("pod %s: claim %s names a shared ResourceClaim; the simulator places per-pod templates only", p.Name, rc.Name)
			}
			t, ok := templates[*rc.ResourceClaimTemplateName]
			if !ok {
				return nil, nil, fmt.Errorf("pod %s: ResourceClaimTemplate %s is not in the workload", p.Name, *rc.ResourceClaimTemplateName)
			}
			spec := t.Spec.Spec.DeepCopy()
			defaultSpec(spec)
			item.Claims = append(item.Claims, *spec)
		}
		if len(item.Claims) > 0 {
			out = append(out, item)
		}
	}
	return out, classes, nil
}

// Ask is one generated inference pod: its guaranteed memory and limit;
// Whole means the whole GPU.
type Ask struct {
	Request, Limit resource.Quantity
	Whole          bool
}

// Mix is the default trace: inference pods of these sizes, in these
// proportions, limits 1.5 times the request (capped at the GPU).
var Mix = []struct {
	Size   string
	Weight int
}{{"8Gi", 25}, {"16Gi", 25}, {"24Gi", 20}, {"40Gi", 15}, {"70Gi", 10}, {"whole", 5}}

// Generate draws n asks from Mix with a seeded generator, so every
// strategy in the benchmark sees the same trace.
func Generate(n int, seed uint64, gpuMemory resource.Quantity) []Ask {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, m := range Mix {
		total += m.Weight
	}
	out := make([]Ask, n)
	for i := range out {
		pick := rng.IntN(total)
		for _, m := range Mix {
			if pick < m.Weight {
				if m.Size == "whole" {
					out[i] = Ask{Request: gpuMemory, Limit: gpuMemory, Whole: true}
				} else {
					req := resource.MustParse(m.Size)
					lim := resource.NewQuantity(min(req.Value()*3/2, gpuMemory.Value()), resource.BinarySI)
					out[i] = Ask{Request: req, Limit: *lim}
				}
				break
			}
			pick -= m.Weight
		}
	}
	return out
}

// Pods turns asks into workload pods with gpufrac claims (class gpufrac.dev;
// a whole-GPU ask names no memory, so it consumes the whole device).
func Pods(asks []Ask) []Pod {
	out := make([]Pod, len(asks))
	for i, a := range asks {
		req := resourceapi.ExactDeviceRequest{DeviceClassName: v1alpha1.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
		spec := resourceapi.ResourceClaimSpec{}
		if !a.Whole {
			req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": a.Request}}
		}
		spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}
		out[i] = Pod{Name: fmt.Sprintf("inference-%04d", i), Replicas: 1, Claims: []resourceapi.ResourceClaimSpec{spec}}
	}
	return out
}

// positiveMemory refuses a memory request that is not positive: the API
// server does not check it (inferred from k8s.io/kubernetes v1.37.2
// pkg/apis/resource/validation, which validates no claim capacity
// request), and a share of nothing has no meaning to place.
func positiveMemory(spec *resourceapi.ResourceClaimSpec) error {
	check := func(path string, c *resourceapi.CapacityRequirements) error {
		if c == nil {
			return nil
		}
		if q, ok := c.Requests["memory"]; ok && q.Sign() <= 0 {
			return fmt.Errorf("%s.capacity.requests[memory]: %s: must be greater than zero", path, q.String())
		}
		return nil
	}
	for i, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			if err := check(fmt.Sprintf("spec.spec.devices.requests[%d].exactly", i), r.Exactly.Capacity); err != nil {
				return err
			}
		}
		for j, s := range r.FirstAvailable {
			if err := check(fmt.Sprintf("spec.spec.devices.requests[%d].firstAvailable[%d]", i, j), s.Capacity); err != nil {
				return err
			}
		}
	}
	return nil
}

// defaultSpec applies the API server's defaults for requests read from a
// file: one device, counted exactly.
func defaultSpec(spec *resourceapi.ResourceClaimSpec) {
	def := func(mode *resourceapi.DeviceAllocationMode, count *int64) {
		if *mode == "" {
			*mode = resourceapi.DeviceAllocationModeExactCount
		}
		if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
			*count = 1
		}
	}
	for i := range spec.Devices.Requests {
		r := &spec.Devices.Requests[i]
		if r.Exactly != nil {
			def(&r.Exactly.AllocationMode, &r.Exactly.Count)
		}
		for j := range r.FirstAvailable {
			def(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
		}
	}
}
