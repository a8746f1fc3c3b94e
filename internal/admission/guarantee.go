// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/deviceclass"
	"github.com/gpufrac/gpufrac/internal/safetext"
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
	pod, done := podOnCreate(req)
	if done != nil {
		return done
	}
	var problems, warnings []string
	// A claim named directly may be listed under several names: it is
	// one claim, prepared once for the pod, so its holders are counted
	// together. A template makes a claim of its own for each entry.
	seen := map[string]bool{}
	for i, pc := range pod.Spec.ResourceClaims {
		path := field.NewPath("spec", "resourceClaims").Index(i)
		if p := invalidSourceName(pc, path); p != "" {
			problems = append(problems, p)
			continue
		}
		if pc.ResourceClaimName != nil && seen[*pc.ResourceClaimName] {
			continue
		}
		gpufrac, reservedBy, err := s.claimSource(ctx, pod.Namespace, pc)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v; the node checks the claim when it prepares it", path, err))
			continue
		}
		if !gpufrac {
			continue
		}
		problems = append(problems, sharedClaimProblems(pod, i, reservedBy, seen)...)
	}
	if len(problems) > 0 {
		resp := deny(http.StatusUnprocessableEntity, "one guarantee per claim: "+problemList(problems))
		resp.Warnings = warnings
		return resp
	}
	if len(warnings) > 0 {
		klog.FromContext(ctx).V(2).Info("Pod admitted without checking some claims", "pod", klog.KRef(pod.Namespace, podName(pod)), "warnings", warnings)
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

// asksGPUFrac: allocated to gpufrac, or a request of a DeviceClass that
// may use gpufrac (deviceclass.MayUseGpufrac: its selectors name the
// driver, or it configures it), or a gpufrac config. Devices and requests
// with adminAccess (monitoring pods) do not count: they hold no
// guarantee, so any number of containers may use them.
func (s *Server) asksGPUFrac(spec resourceapi.ResourceClaimSpec, alloc *resourceapi.AllocationResult) bool {
	if alloc != nil {
		ours, counted := false, false
		for _, r := range alloc.Devices.Results {
			if r.Driver == v1alpha1.DriverName {
				ours = true
				counted = counted || !ptr.Deref(r.AdminAccess, false)
			}
		}
		if ours {
			return counted
		}
	}
	mayUse := deviceclass.Names(s.Cluster.DeviceClasses(), deviceclass.MayUseGpufrac)
	monitorsOnly := len(spec.Devices.Requests) > 0
	for r := range deviceclass.Requests(&spec) {
		if r.AdminAccess {
			continue
		}
		monitorsOnly = false
		if mayUse(r.Class) {
			return true
		}
	}
	return !monitorsOnly && deviceclass.CarriesGpufracConfig(&spec)
}

// sharedClaimProblems says why the gpufrac claim of the pod's entry i would
// be guaranteed more than once: another pod holds it (reservedBy), or more
// than one container of the pod would, under any of the names the pod
// gives it. It marks a claim named directly as seen.
func sharedClaimProblems(pod *corev1.Pod, i int, reservedBy []string, seen map[string]bool) []string {
	pc := pod.Spec.ResourceClaims[i]
	path := fmt.Sprintf("spec.resourceClaims[%d]", i)
	var problems []string
	if len(reservedBy) > 0 {
		problems = append(problems, fmt.Sprintf("%s: ResourceClaim %s/%s is already in use by %s; gpufrac gives a claim's guaranteed GPU memory to one pod, so a second one would be guaranteed it twice; give each pod its own claim (resourceClaimTemplateName)",
			path, pod.Namespace, *pc.ResourceClaimName, strings.Join(reservedBy, ", ")))
	}
	names := []string{pc.Name}
	if pc.ResourceClaimName != nil {
		seen[*pc.ResourceClaimName] = true
		for _, other := range pod.Spec.ResourceClaims[i+1:] {
			if other.ResourceClaimName != nil && *other.ResourceClaimName == *pc.ResourceClaimName {
				names = append(names, other.Name)
			}
		}
	}
	holders := plan.HoldersOf(pod, names)
	if len(holders) < 2 {
		return problems
	}
	list := make([]string, len(holders))
	for j, h := range holders {
		list[j] = h.Container
		if len(names) > 1 {
			list[j] += fmt.Sprintf(" (as %q)", h.As)
		}
	}
	if len(names) > 1 {
		return append(problems, fmt.Sprintf("%s: ResourceClaim %s/%s is used by %s at once, under the names %s: it is one claim, so the memory the scheduler accounted once would be guaranteed %d times; give each container its own claim",
			path, pod.Namespace, *pc.ResourceClaimName, strings.Join(list, " and "), strings.Join(names, ", "), len(holders)))
	}
	return append(problems, fmt.Sprintf("%s: gpufrac claim %q is used by %s at once; gpufrac applies a claim's limits to each container that uses it, so the memory the scheduler accounted once would be guaranteed %d times; give each container its own claim",
		path, pc.Name, strings.Join(list, " and "), len(holders)))
}

// invalidSourceName refuses a claim or template name no API server would
// accept (a DNS subdomain, at most 253 characters), before it is looked
// up or repeated: a request sent to the webhook directly may carry any.
func invalidSourceName(pc corev1.PodResourceClaim, path *field.Path) string {
	check := func(name *string, child string) string {
		if name == nil {
			return ""
		}
		if msgs := validation.IsDNS1123Subdomain(*name); len(msgs) > 0 {
			return field.Invalid(path.Child(child), safetext.Cap(*name, 64), msgs[0]).Error()
		}
		return ""
	}
	if p := check(pc.ResourceClaimName, "resourceClaimName"); p != "" {
		return p
	}
	return check(pc.ResourceClaimTemplateName, "resourceClaimTemplateName")
}
