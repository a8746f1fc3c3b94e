// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
)

// PathValidatePods is the validating webhook for Pods: one guarantee per
// claim (plan.CheckOneGuarantee), refused when the pod is created rather
// than when its container would start. Prepare checks again on the node.
const PathValidatePods = "/validate-pods"

// validatePod refuses a pod that hands a gpufrac claim to more than one of
// its containers at once, or that uses a shared gpufrac claim another pod
// already holds. A claim or template it cannot read is left to Prepare,
// with a warning: the webhook fails open, the node does not.
func (s *Server) validatePod(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return allow()
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(http.StatusBadRequest, "decoding the pod: "+err.Error())
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	var problems, warnings []string
	for i, pc := range pod.Spec.ResourceClaims {
		path := fmt.Sprintf("spec.resourceClaims[%d]", i)
		gpufrac, reservedBy, err := s.claimSource(ctx, pod.Namespace, pc)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v; the node checks the claim when it prepares it", path, err))
			continue
		}
		if !gpufrac {
			continue
		}
		if len(reservedBy) > 0 {
			problems = append(problems, fmt.Sprintf("%s: ResourceClaim %s/%s is already in use by %s; gpufrac gives a claim's guaranteed GPU memory to one pod, so a second one would be guaranteed it twice; give each pod its own claim (resourceClaimTemplateName)",
				path, pod.Namespace, *pc.ResourceClaimName, strings.Join(reservedBy, ", ")))
		}
		if holders := plan.ClaimHolders(&pod, pc.Name); len(holders) > 1 {
			problems = append(problems, fmt.Sprintf("%s: gpufrac claim %q is used by %s at once; gpufrac applies a claim's limits to each container that uses it, so the memory the scheduler accounted once would be guaranteed %d times; give each container its own claim",
				path, pc.Name, strings.Join(holders, " and "), len(holders)))
		}
	}
	if len(problems) > 0 {
		resp := deny(http.StatusUnprocessableEntity, "one guarantee per claim: "+problemList(problems))
		resp.Warnings = warnings
		return resp
	}
	if len(warnings) > 0 {
		klog.FromContext(ctx).V(2).Info("Pod admitted without checking some claims", "pod", klog.KRef(pod.Namespace, podName(&pod)), "warnings", warnings)
	}
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// claimSource reads what a pod claim refers to: whether it asks gpufrac for
// devices, and which pods already hold it (a claim by name only).
func (s *Server) claimSource(ctx context.Context, namespace string, pc corev1.PodResourceClaim) (bool, []string, error) {
	switch {
	case pc.ResourceClaimTemplateName != nil:
		// From the informer cache when it holds the template: a
		// template's spec cannot change (the API server refuses an update
		// to it, *source*: ValidateResourceClaimTemplateUpdate), so the
		// cache answers as the server would, without a GET for every pod
		// created. A template created together with its pods may not have
		// reached the cache yet: only then is the server asked.
		if spec := s.Cluster.ClaimSpec(namespace, corev1.PodResourceClaim{ResourceClaimTemplateName: pc.ResourceClaimTemplateName}); spec != nil {
			return s.asksGPUFrac(*spec, nil), nil, nil
		}
		tmpl, err := s.Reader.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, *pc.ResourceClaimTemplateName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil, fmt.Errorf("ResourceClaimTemplate %s/%s does not exist (yet)", namespace, *pc.ResourceClaimTemplateName)
		}
		if err != nil {
			return false, nil, fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", namespace, *pc.ResourceClaimTemplateName, err)
		}
		return s.asksGPUFrac(tmpl.Spec.Spec, nil), nil, nil
	case pc.ResourceClaimName != nil:
		claim, err := s.Reader.ResourceV1().ResourceClaims(namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil, fmt.Errorf("ResourceClaim %s/%s does not exist (yet)", namespace, *pc.ResourceClaimName)
		}
		if err != nil {
			return false, nil, fmt.Errorf("reading ResourceClaim %s/%s: %w", namespace, *pc.ResourceClaimName, err)
		}
		var reserved []string
		for _, r := range claim.Status.ReservedFor {
			if r.Resource == "pods" && r.APIGroup == "" {
				reserved = append(reserved, "pod "+r.Name)
			}
		}
		return s.asksGPUFrac(claim.Spec, claim.Status.Allocation), reserved, nil
	}
	return false, nil, nil
}

// asksGPUFrac: allocated to gpufrac, or a request of a gpufrac DeviceClass
// (one whose selectors or config name the driver), or a gpufrac config.
func (s *Server) asksGPUFrac(spec resourceapi.ResourceClaimSpec, alloc *resourceapi.AllocationResult) bool {
	if alloc != nil {
		for _, r := range alloc.Devices.Results {
			if r.Driver == v1alpha1.DriverName {
				return true
			}
		}
	}
	for _, c := range spec.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	classes := map[string]bool{}
	for _, c := range s.Cluster.DeviceClasses() {
		classes[c.Name] = isGPUFracClass(c)
	}
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil && classes[r.Exactly.DeviceClassName] {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if classes[sub.DeviceClassName] {
				return true
			}
		}
	}
	return false
}

func isGPUFracClass(c *resourceapi.DeviceClass) bool {
	for _, cfg := range c.Spec.Config {
		if cfg.Opaque != nil && cfg.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	for _, sel := range c.Spec.Selectors {
		if sel.CEL != nil && strings.Contains(sel.CEL.Expression, `"`+v1alpha1.DriverName+`"`) && strings.Contains(sel.CEL.Expression, "device.driver") {
			return true
		}
	}
	return false
}
