// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// workload is what the benchmark applies, in order.
type workload struct {
	classes   []*resourceapi.DeviceClass
	templates []*resourceapi.ResourceClaimTemplate
	pods      []*v1.Pod
}

// loadWorkload reads ResourceClaimTemplates, DeviceClasses and Pods (the
// gpufrac.dev/replicas annotation makes one Pod stand for N, as in
// `kubectl gpufrac simulate`). KAI-annotated pods are translated with the
// controller's code, as its webhook would.
func loadWorkload(data []byte, sizes []resource.Quantity) (*workload, error) {
	w := &workload{}
	seen := map[string]bool{}
	doc := 0
	for raw, err := range yamldocs.All(data) {
		doc++
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &meta); err != nil || meta.Kind == "" {
			continue
		}
		switch meta.Kind {
		case "ResourceClaimTemplate":
			var t resourceapi.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict(raw, &t); err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			w.templates = append(w.templates, &t)
			seen[t.Name] = true
		case "DeviceClass":
			var c resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict(raw, &c); err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			w.classes = append(w.classes, &c)
		case "Pod":
			var p v1.Pod
			if err := yaml.UnmarshalStrict(raw, &p); err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			n := 1
			if v, ok := p.Annotations[simulate.AnnotationReplicas]; ok {
				if n, err = strconv.Atoi(v); err != nil || n < 1 {
					return nil, fmt.Errorf("pod %s: %s=%q is not a positive number", p.Name, simulate.AnnotationReplicas, v)
				}
			}
			translated, err := kai.Translate(&p, kai.Options{GPUMemorySizes: sizes})
			if err != nil {
				return nil, fmt.Errorf("pod %s: %w", p.Name, err)
			}
			if translated != nil {
				if t := translated.Template; t != nil && !seen[t.Name] {
					w.templates = append(w.templates, t)
					seen[t.Name] = true
				}
				p = *translated.Pod
			}
			for i := range n {
				c := p.DeepCopy()
				if n > 1 {
					c.Name = fmt.Sprintf("%s-%d", p.Name, i)
				}
				w.pods = append(w.pods, c)
			}
		default:
			return nil, fmt.Errorf("document %d: kind %s is not one the benchmark applies (ResourceClaimTemplate, DeviceClass, Pod)", doc, meta.Kind)
		}
	}
	for _, p := range w.pods {
		for _, rc := range p.Spec.ResourceClaims {
			if rc.ResourceClaimTemplateName != nil && !seen[*rc.ResourceClaimTemplateName] {
				return nil, fmt.Errorf("pod %s: ResourceClaimTemplate %s is not in the workload", p.Name, *rc.ResourceClaimTemplateName)
			}
		}
	}
	if len(w.pods) == 0 {
		return nil, fmt.Errorf("the workload has no pods")
	}
	return w, nil
}

// traceWorkload turns a generated trace (simulate.Generate, the packing
// benchmark's) into templates, one per size, and pods in trace order.
func traceWorkload(asks []simulate.Ask) (*workload, error) {
	w := &workload{}
	byName := map[string]bool{}
	for i, a := range asks {
		name := "whole-gpu"
		if !a.Whole {
			name = "frac-" + strings.ToLower(a.Request.String())
		}
		if !byName[name] {
			byName[name] = true
			t, err := traceTemplate(name, a)
			if err != nil {
				return nil, err
			}
			w.templates = append(w.templates, t)
		}
		w.pods = append(w.pods, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("inference-%04d", i)},
			Spec: v1.PodSpec{
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(name)}},
				Containers: []v1.Container{{Name: "server", Image: "inference:latest",
					Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
			},
		})
	}
	return w, nil
}

func traceTemplate(name string, a simulate.Ask) (*resourceapi.ResourceClaimTemplate, error) {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: v1alpha1.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	spec := resourceapi.ResourceClaimSpec{}
	if !a.Whole {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": a.Request}}
		raw, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.APIVersion, "kind": v1alpha1.Kind, "memoryLimit": a.Limit.String()})
		if err != nil {
			return nil, err
		}
		spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{Raw: raw}}}}}
	}
	spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}, nil
}
