// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

type claimSpecs struct {
	templates, claims map[string]*resourceapi.ResourceClaimSpec
}

func (c claimSpecs) TemplateSpec(_ context.Context, ns, name string) (*resourceapi.ResourceClaimSpec, bool) {
	s, ok := c.templates[ns+"/"+name]
	return s, ok
}

func (c claimSpecs) ClaimSpec(_ context.Context, ns, name string) (*resourceapi.ResourceClaimSpec, bool) {
	s, ok := c.claims[ns+"/"+name]
	return s, ok
}

func gpuSpec(class string, memory string) *resourceapi.ResourceClaimSpec {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	if memory != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	return &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}}
}

func claimPod(mutate func(*corev1.Pod), claims ...corev1.PodResourceClaim) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}, ResourceClaims: claims},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func fromTemplate(name string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(name)}
}

// TestPackingPatch sends pods through the packing webhook and applies its
// patch with the JSON patch library the API server applies it with: the
// result must carry the label and exactly one packing term, beside what
// the pod brought; pods that are not fraction pods are left alone.
func TestPackingPatch(t *testing.T) {
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	other := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}}}
	classes = append(classes, other)
	specs := claimSpecs{
		templates: map[string]*resourceapi.ResourceClaimSpec{
			"team/frac-16g":   gpuSpec("gpufrac.dev", "16Gi"),
			"team/sm-8g":      gpuSpec("sm-sharing.gpufrac.dev", "8Gi"),
			"team/whole":      gpuSpec("gpufrac.dev", ""),
			"team/nvidia-mem": gpuSpec("gpu.nvidia.com", "16Gi"),
		},
		claims: map[string]*resourceapi.ResourceClaimSpec{"team/shared": gpuSpec("gpufrac.dev", "40Gi")},
	}
	s := &admission.Server{Cluster: staticCluster{classes: classes}, Claims: specs}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	own := corev1.PreferredSchedulingTerm{Weight: 10, Preference: corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}
	required := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}
	podAff := &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: corev1.LabelHostname}}}
	packed := podterms.Terms()
	withOwn := append([]corev1.PreferredSchedulingTerm{own}, packed...)

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		// wantTerms is the preferred node-affinity list after the patch; nil
		// means the webhook must not patch at all.
		wantTerms []corev1.PreferredSchedulingTerm
		check     func(t *testing.T, got *corev1.Pod)
	}{
		{name: "fraction template, no affinity", pod: claimPod(nil, fromTemplate("frac-16g")), wantTerms: packed},
		{name: "SMSharing class fraction", pod: claimPod(nil, fromTemplate("sm-8g")), wantTerms: packed},
		{name: "shared claim with a fraction", pod: claimPod(nil, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("shared")}),
			wantTerms: packed},
		{name: "KAI-translated pod whose template is not created yet",
			pod:       claimPod(func(p *corev1.Pod) { p.Annotations = map[string]string{kai.AnnotationTranslated: "gpufrac-kai-abc"} }, fromTemplate("gpufrac-kai-abc")),
			wantTerms: packed},
		{name: "own labels and pod affinity are kept",
			pod: claimPod(func(p *corev1.Pod) {
				p.Labels = map[string]string{"app": "llm"}
				p.Spec.Affinity = &corev1.Affinity{PodAffinity: podAff}
			}, fromTemplate("frac-16g")),
			wantTerms: packed,
			check: func(t *testing.T, got *corev1.Pod) {
				if got.Labels["app"] != "llm" || !equality.Semantic.DeepEqual(got.Spec.Affinity.PodAffinity, podAff) {
					t.Errorf("the pod's own labels or pod affinity changed: %v %+v", got.Labels, got.Spec.Affinity.PodAffinity)
				}
			}},
		{name: "own required node affinity, no preferred",
			pod: claimPod(func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: required}}
			}, fromTemplate("frac-16g")),
			wantTerms: packed,
			check: func(t *testing.T, got *corev1.Pod) {
				if r := got.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; !equality.Semantic.DeepEqual(r, required) {
					t.Errorf("the pod's required term changed: %+v", r)
				}
			}},
		{name: "own preferred terms: ours are appended",
			pod: claimPod(func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{own}}}
			}, fromTemplate("frac-16g")),
			wantTerms: withOwn},
		{name: "already packed (reinvocation): no patch",
			pod: claimPod(func(p *corev1.Pod) {
				p.Labels = map[string]string{podterms.LabelFraction: "true"}
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: packed}}
			}, fromTemplate("frac-16g"))},
		{name: "whole GPU (no memory request) is not packed", pod: claimPod(nil, fromTemplate("whole"))},
		{name: "another driver's memory request is not packed", pod: claimPod(nil, fromTemplate("nvidia-mem"))},
		{name: "unknown template is not packed", pod: claimPod(nil, fromTemplate("missing"))},
		{name: "no claims", pod: claimPod(nil)},
		{name: "opted out",
			pod: claimPod(func(p *corev1.Pod) { p.Annotations = map[string]string{podterms.AnnotationPacking: "false"} }, fromTemplate("frac-16g"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := review(t, srv, admission.PathPackPods, "Pod", admissionv1.Create, tc.pod)
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if tc.wantTerms == nil {
				if resp.Patch != nil {
					t.Fatalf("patched a pod it must leave alone: %s", resp.Patch)
				}
				return
			}
			raw, err := json.Marshal(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				t.Fatalf("the patch %s does not decode: %v", resp.Patch, err)
			}
			out, err := patch.Apply(raw)
			if err != nil {
				t.Fatalf("the patch %s does not apply: %v", resp.Patch, err)
			}
			var got corev1.Pod
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got.Labels[podterms.LabelFraction] != "true" {
				t.Errorf("label %s missing: %v", podterms.LabelFraction, got.Labels)
			}
			if terms := got.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution; !equality.Semantic.DeepEqual(terms, tc.wantTerms) {
				t.Errorf("preferred terms:\n got %+v\nwant %+v", terms, tc.wantTerms)
			}
			if !equality.Semantic.DeepEqual(got.Spec.ResourceClaims, tc.pod.Spec.ResourceClaims) || !equality.Semantic.DeepEqual(got.Spec.Containers, tc.pod.Spec.Containers) {
				t.Error("the patch changed more than labels and affinity")
			}
			if tc.check != nil {
				tc.check(t, &got)
			}
			// Applied twice (reinvocation), the webhook adds nothing.
			if again := podterms.Patch(&got); len(again) != 0 {
				t.Errorf("a packed pod gets more operations: %+v", again)
			}
		})
	}
}

func TestPackingWithoutClaimSpecsAllows(t *testing.T) {
	s := &admission.Server{Cluster: staticCluster{}}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp := review(t, srv, admission.PathPackPods, "Pod", admissionv1.Create, claimPod(nil, fromTemplate("frac-16g")))
	if !resp.Allowed || resp.Patch != nil {
		t.Fatalf("want allowed without a patch, got %+v", resp)
	}
}
