// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// FuzzTranslate: a translated pod references exactly the template produced,
// one container gets the claim, and the template's requests match the
// annotations (memory, count, the per-size share of a fraction as KAI's
// binder computes it).
func FuzzTranslate(f *testing.F) {
	f.Add("0.5", "", "", "", "", "main")
	f.Add("", "20000", "2", "", "", "main")
	f.Add("", "", "", "20Gi", "30Gi", "main")
	f.Add("", "", "", "", "8Gi", "side")
	f.Add("1", "x", "0", "-1", "1Ki", "")
	// Near the int64 edges: MiB that overflow bytes, counts past any node,
	// quantities past any GPU, portions at the smallest float.
	f.Add("", "9223372036854775807", "", "", "", "main")
	f.Add("", "8796093022207", "", "", "", "main")
	f.Add("", "8796093022208", "9223372036854775807", "", "", "main")
	f.Add("", "18446744073709551615", "-9223372036854775808", "", "", "main")
	f.Add("", "144384", "33", "", "", "main")
	f.Add("4.9e-324", "", "8", "", "", "main")
	f.Add("0.9999999999999999", "", "", "", "", "main")
	f.Add("", "", "", "9223372036854775807", "8Ei", "main")
	f.Add("", "", "", "1e30", "-8Ei", "main")
	f.Add("", "", "", "1m", "141Gi", "main")
	// Exponents whose arithmetic took minutes before the text was bounded.
	f.Add("", "", "", "1E-999999999", "", "main")
	f.Add("", "", "", "1Gi", "1e999999999", "main")
	f.Fuzz(func(t *testing.T, fraction, memory, num, request, limit, container string) {
		a := map[string]string{}
		set := func(k, v string) {
			if v != "" {
				a[k] = v
			}
		}
		set("gpu-fraction", fraction)
		set("gpu-memory", memory)
		set("gpu-fraction-num-devices", num)
		set("nvidia.com/container."+container+".gpu-memory.request", request)
		set("nvidia.com/container."+container+".gpu-memory.limit", limit)
		p := pod(a, "main", "side")
		res, err := kai.Translate(p, kai.Options{GPUMemorySizes: sizes, MaxGPUsPerNode: 8})
		if err != nil || res == nil {
			return
		}
		checkBounded(t, res)
		if len(res.Pod.Spec.ResourceClaims) != 1 || *res.Pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != res.Template.Name {
			t.Fatalf("pod claims %+v do not reference the template %s", res.Pod.Spec.ResourceClaims, res.Template.Name)
		}
		claimed := 0
		for _, c := range res.Pod.Spec.Containers {
			claimed += len(c.Resources.Claims)
		}
		if claimed != 1 {
			t.Fatalf("%d container claims, want exactly one (KAI: one fractional container per pod)", claimed)
		}
		if m, err := strconv.ParseInt(memory, 10, 64); err == nil && fraction == "" && request == "" && limit == "" {
			n, _ := strconv.Atoi(num)
			checkExact(t, templateOf(t, res, "main"), resource.NewQuantity(m<<20, resource.BinarySI), max(n, 1))
		}
		if x, err := strconv.ParseFloat(fraction, 64); err == nil && memory == "" && request == "" && limit == "" {
			tmpl := templateOf(t, res, "main")
			for i, sub := range tmpl.Spec.Spec.Devices.Requests[0].FirstAvailable {
				size := sizesAscending()[i]
				// KAI's binder: floor(usable MiB x the portion as %.2f
				// made it), no reserve here; the claim asks that rounded
				// up to the 256Mi step, at most the whole GPU.
				received, _ := strconv.ParseFloat(fmt.Sprintf("%.2f", x), 64)
				step := int64(256) << 20
				want := min((int64(float64(size.Value()>>20)*received)<<20+step-1)/step*step, size.Value())
				got := sub.Capacity.Requests["memory"]
				if got.Value() != want {
					t.Fatalf("fraction %s on %s: request %s, want %d bytes", fraction, size.String(), got.String(), want)
				}
			}
		}
		for _, r := range res.Template.Spec.Spec.Devices.Requests {
			if q, ok := exactMemory(r); ok && q.Sign() <= 0 {
				t.Fatalf("template %s asks for no memory", res.Template.Name)
			}
		}
	})
}

// checkBounded: whatever the annotations, a template never asks for more
// devices than a node holds, nor for memory that is not positive or more
// than the largest GPU, in a request or a limit.
func checkBounded(t *testing.T, res *kai.Result) {
	t.Helper()
	largest := sizes[0] // 141Gi
	check := func(what string, q resource.Quantity) {
		if q.Sign() <= 0 || q.Cmp(largest) > 0 {
			t.Fatalf("template %s: %s %s outside (0, %s]", res.Template.Name, what, q.String(), largest.String())
		}
	}
	for _, r := range res.Template.Spec.Spec.Devices.Requests {
		subs := r.FirstAvailable
		if r.Exactly != nil {
			subs = append(subs, resourceapi.DeviceSubRequest{Count: r.Exactly.Count, Capacity: r.Exactly.Capacity})
		}
		for _, s := range subs {
			if s.Count < 1 || s.Count > 8 {
				t.Fatalf("template %s: count %d outside [1, 8]", res.Template.Name, s.Count)
			}
			check("memory request", s.Capacity.Requests["memory"])
		}
	}
	for _, c := range res.Template.Spec.Spec.Devices.Config {
		var cfg struct {
			MemoryLimit *resource.Quantity `json:"memoryLimit"`
		}
		if err := json.Unmarshal(c.Opaque.Parameters.Raw, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.MemoryLimit != nil {
			check("memoryLimit", *cfg.MemoryLimit)
		}
	}
}

func sizesAscending() []resource.Quantity { return []resource.Quantity{sizes[1], sizes[0]} }

func templateOf(t *testing.T, res *kai.Result, container string) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	var claim string
	for _, c := range append(append([]corev1.Container{}, res.Pod.Spec.InitContainers...), res.Pod.Spec.Containers...) {
		if c.Name == container && len(c.Resources.Claims) == 1 {
			claim = c.Resources.Claims[0].Name
		}
	}
	for _, pc := range res.Pod.Spec.ResourceClaims {
		if pc.Name == claim && *pc.ResourceClaimTemplateName == res.Template.Name {
			return res.Template
		}
	}
	t.Fatalf("container %s has no translated claim", container)
	return nil
}

func checkExact(t *testing.T, tmpl *resourceapi.ResourceClaimTemplate, memory *resource.Quantity, count int) {
	t.Helper()
	r := tmpl.Spec.Spec.Devices.Requests[0].Exactly
	if r == nil {
		t.Fatalf("template %s: want an exact request", tmpl.Name)
	}
	got := r.Capacity.Requests["memory"]
	if got.Cmp(*memory) != 0 || r.Count != int64(count) {
		t.Fatalf("template asks %s x%d, annotations say %s x%d", got.String(), r.Count, memory.String(), count)
	}
	if count > 1 && len(tmpl.Spec.Spec.Devices.Constraints) != 1 {
		t.Fatalf("count %d without a distinct-GPU constraint", count)
	}
}

func exactMemory(r resourceapi.DeviceRequest) (resource.Quantity, bool) {
	if r.Exactly == nil {
		return resource.Quantity{}, false
	}
	q, ok := r.Exactly.Capacity.Requests["memory"]
	return q, ok
}
