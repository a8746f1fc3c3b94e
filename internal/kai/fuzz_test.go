package kai_test

import (
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/kai"
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
		res, err := kai.Translate(p, kai.Options{GPUMemorySizes: sizes})
		if err != nil || res == nil {
			return
		}
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
				// KAI's binder: floor(usable MiB x portion), no reserve here.
				want := int64(float64(size.Value()>>20)*x) << 20
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
