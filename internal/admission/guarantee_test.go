// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission"
)

func TestValidatePodOneGuaranteePerClaim(t *testing.T) {
	gpufracClass := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpufrac.dev"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`}}}}}
	otherClass := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "nic"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "nic.example.com"`}}}}}
	spec := func(class string) resourceapi.ResourceClaimSpec {
		return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}}
	}
	adminSpec := spec("gpufrac.dev")
	adminSpec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	client := fake.NewClientset(
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec("gpufrac.dev")}},
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "nic", Namespace: "team"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec("nic")}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "team"}, Spec: spec("gpufrac.dev"),
			Status: resourceapi.ResourceClaimStatus{ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "first", UID: "u1"}}}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: "team"}, Spec: spec("gpufrac.dev")},
		// A monitoring claim (adminAccess) guarantees nothing: shared by
		// containers and pods, it passes, allocated or not.
		&resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "dcgm", Namespace: "team"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: adminSpec}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "monitor", Namespace: "team"}, Spec: adminSpec,
			Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: "gpufrac.dev", Pool: "n", Device: "gpu-0", AdminAccess: ptr.To(true)}}}},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "first", UID: "u1"}}}},
	)
	// "cached" is in the informer cache only: the webhook must answer
	// from it, without asking the API server.
	cached := spec("gpufrac.dev")
	s := &admission.Server{Reader: client, Cluster: staticCluster{classes: []*resourceapi.DeviceClass{gpufracClass, otherClass},
		templates: map[string]*resourceapi.ResourceClaimSpec{"cached": &cached}}}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	use := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}
	}
	pod := func(claim corev1.PodResourceClaim, containers ...corev1.Container) *corev1.Pod {
		claim.Name = "gpu"
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{claim}, Containers: containers}}
	}
	tmpl := func(n string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{ResourceClaimTemplateName: ptr.To(n)}
	}
	named := func(n string) corev1.PodResourceClaim { return corev1.PodResourceClaim{ResourceClaimName: ptr.To(n)} }
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    string // "" = allowed
		warning string
	}{
		{name: "one container, a template", pod: pod(tmpl("llm"), use("main"), corev1.Container{Name: "log", Image: "x"})},
		{name: "two containers share a template's claim", pod: pod(tmpl("llm"), use("main"), use("helper")),
			want: `spec.resourceClaims[0]: gpufrac claim "gpu" is used by container main and container helper at once`},
		{name: "two containers share another driver's claim", pod: pod(tmpl("nic"), use("main"), use("helper"))},
		{name: "a claim another pod holds", pod: pod(named("held"), use("main")), want: "ResourceClaim team/held is already in use by pod first"},
		{name: "a free named claim", pod: pod(named("free"), use("main"))},
		{name: "a template not created yet", pod: pod(tmpl("later"), use("main"), use("helper")), warning: "does not exist (yet); the node checks the claim"},
		// One claim under two names is one claim twice.
		{name: "one claim under two names", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "a", ResourceClaimName: ptr.To("free")}, {Name: "b", ResourceClaimName: ptr.To("free")}},
			Containers: []corev1.Container{
				{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "a"}}}},
				{Name: "helper", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "b"}}}},
			}}},
			want: `ResourceClaim team/free is used by container main (as "a") and container helper (as "b") at once`},
		{name: "two containers share a monitoring template's claim", pod: pod(tmpl("dcgm"), use("exporter"), use("sidecar"))},
		{name: "a monitoring claim another pod holds", pod: pod(named("monitor"), use("exporter"), use("sidecar"))},
		{name: "a cached template's claim shared", pod: pod(tmpl("cached"), use("main"), use("helper")),
			want: `spec.resourceClaims[0]: gpufrac claim "gpu" is used by container main and container helper at once`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := review(t, srv, admission.PathValidatePods, "Pod", admissionv1.Create, tc.pod)
			if tc.want == "" {
				if !resp.Allowed {
					t.Fatalf("refused: %v", resp.Result)
				}
				if tc.warning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tc.warning)) {
					t.Errorf("warnings %v, want one containing %q", resp.Warnings, tc.warning)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.want) {
				t.Fatalf("got allowed=%v %v, want refused with %q", resp.Allowed, resp.Result, tc.want)
			}
		})
	}
	for _, a := range client.Actions() {
		if get, ok := a.(clienttesting.GetAction); ok && get.GetResource().Resource == "resourceclaimtemplates" && get.GetName() == "cached" {
			t.Errorf("asked the API server for template %q, which the cache holds", get.GetName())
		}
	}
}
