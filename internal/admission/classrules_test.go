// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/deviceclass/deviceclasstest"
	"github.com/gpufrac/gpufrac/internal/manifestcheck"
)

// TestEachCallerCountsTheClassesItsPurposeNeeds pins, for every caller of
// internal/deviceclass, which kinds of class count as gpufrac's:
//
//   - the webhook's strip of NVIDIA variables and its one-guarantee check
//     protect a container that could get a gpufrac device or config
//     (deviceclass.MayUseGpufrac): a class that selects gpufrac's devices
//     or configures the driver;
//   - packing and the manifest checker are about the devices a request
//     gets (deviceclass.SelectsGpufrac): a class whose selectors name the
//     driver, whatever its name or config; the manifest checker goes by
//     the name only for a class that is not among its inputs.
//
// Each class is used by a claim template with a 16Gi memory request and no
// config of its own (packing: a fraction), used by two containers (the
// guarantee: refused), each setting NVIDIA_VISIBLE_DEVICES (the strip); the
// manifest checker is given the class and the template asking 100Ti, above
// any GPU.
func TestEachCallerCountsTheClassesItsPurposeNeeds(t *testing.T) {
	type callers struct{ strip, guarantee, packing, manifestcheck bool }
	for _, tc := range []struct {
		name  string
		class *resourceapi.DeviceClass
		want  callers
	}{
		{"config-only", deviceclasstest.Class("frac-config", "", true), callers{true, true, false, false}},
		{"selector-only, by driver", deviceclasstest.Class("frac-selector", `device.driver == "gpufrac.dev"`, false), callers{true, true, true, true}},
		{"selector-only, by attribute", deviceclasstest.Class("frac-h100", `device.attributes["gpufrac.dev"].productName == "NVIDIA H100"`, false), callers{true, true, true, true}},
		{"name-only", deviceclasstest.Class("shared.gpufrac.dev", `device.driver == "gpu.nvidia.com"`, false), callers{false, false, false, false}},
		{"foreign", deviceclasstest.Class("gpu.nvidia.com", `device.driver == "gpu.nvidia.com"`, false), callers{false, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := gpuSpec(tc.class.Name, "16Gi")
			s := &admission.Server{
				Cluster: staticCluster{classes: []*resourceapi.DeviceClass{tc.class}, templates: map[string]*resourceapi.ResourceClaimSpec{"t": spec}},
				Claims:  claimSpecs{templates: map[string]*resourceapi.ResourceClaimSpec{"team/t": spec}},
			}
			srv := httptest.NewServer(s.Handler())
			t.Cleanup(srv.Close)
			got := callers{
				strip:         stripsFrom(t, srv),
				guarantee:     refusesSharing(t, srv),
				packing:       packs(t, srv),
				manifestcheck: boundsMemory(t, tc.class, true),
			}
			if got != tc.want {
				t.Errorf("counted as gpufrac's by %+v, want %+v", got, tc.want)
			}
		})
	}
	// Out of the manifest checker's sight, a class is judged by its name.
	if !boundsMemory(t, deviceclasstest.Class("shared.gpufrac.dev", "", false), false) || boundsMemory(t, deviceclasstest.Class("gpu.nvidia.com", "", false), false) {
		t.Error("a class not among the inputs: want counted when named as the shipped classes are, and only then")
	}
}

// twoHolders is a pod whose two containers use the claim of template "t",
// each setting NVIDIA_VISIBLE_DEVICES.
func twoHolders() *corev1.Pod {
	p := claimPod(nil, fromTemplate("t"))
	use := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
	env := []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	p.Spec.Containers = []corev1.Container{{Name: "main", Image: "x", Env: env, Resources: use}, {Name: "helper", Image: "x", Env: env, Resources: use}}
	return p
}

func stripsFrom(t *testing.T, srv *httptest.Server) bool {
	resp := review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, twoHolders())
	if !resp.Allowed {
		t.Fatalf("strip: refused: %v", resp.Result)
	}
	return len(resp.Warnings) == 2 && strings.Contains(resp.Warnings[0], "removed NVIDIA_VISIBLE_DEVICES")
}

func refusesSharing(t *testing.T, srv *httptest.Server) bool {
	resp := review(t, srv, admission.PathValidatePods, "Pod", admissionv1.Create, twoHolders())
	return !resp.Allowed && resp.Result != nil && strings.Contains(resp.Result.Message, "is used by container main and container helper at once")
}

func packs(t *testing.T, srv *httptest.Server) bool {
	resp := review(t, srv, admission.PathPackPods, "Pod", admissionv1.Create, claimPod(nil, fromTemplate("t")))
	if !resp.Allowed {
		t.Fatalf("packing: refused: %v", resp.Result)
	}
	return len(resp.Patch) > 0
}

// boundsMemory reports whether the manifest checker bounds the memory of a
// request of class by gpufrac's largest GPU; withClass puts the class
// among its inputs.
func boundsMemory(t *testing.T, class *resourceapi.DeviceClass, withClass bool) bool {
	tmpl := &resourceapi.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: *gpuSpec(class.Name, "100Ti")}}
	var inputs []manifestcheck.Input
	for _, obj := range []any{tmpl, class} {
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, manifestcheck.Input{Name: "in", Data: raw})
	}
	if !withClass {
		inputs = inputs[:1]
	}
	results := manifestcheck.Check(inputs...)
	if results[0].Err != nil {
		t.Fatalf("manifest checker: %v", results[0].Err)
	}
	return strings.Contains(strings.Join(results[0].Lines(), "\n"), "must be at most")
}
