// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// What the pod handlers share: the pod of a create request, the check that
// a translation's template is not someone else's, and the patch response.

// podOnCreate decodes the pod of a Pod create request, with the request's
// namespace where the pod names none. Any other request gets done, an
// allowing response, and so does a pod that does not decode, a refusing
// one.
func podOnCreate(req *admissionv1.AdmissionRequest) (pod *corev1.Pod, done *admissionv1.AdmissionResponse) {
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return nil, allow()
	}
	pod = &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return nil, deny(http.StatusBadRequest, "decoding the pod: "+err.Error())
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	return pod, nil
}

// templateConflict refuses a translated template whose name (a hash of
// its spec) an existing template of another spec holds: someone made it
// first, and the pod would run on what they wrote. source says what the
// template was computed from. nil when there is no conflict.
func (s *Server) templateConflict(namespace string, t *resourceapi.ResourceClaimTemplate, source string) *admissionv1.AdmissionResponse {
	existing := s.Cluster.ClaimSpec(namespace, corev1.PodResourceClaim{ResourceClaimTemplateName: &t.Name})
	if existing != nil && !equality.Semantic.DeepEqual(*existing, t.Spec.Spec) {
		return deny(http.StatusConflict, fmt.Sprintf("ResourceClaimTemplate %s/%s exists with a spec other than the one gpufrac computes from the pod's %s; delete it or rename it",
			namespace, t.Name, source))
	}
	return nil
}

// patchResponse allows the pod of raw (decoded as before) changed into
// after, with warnings.
func patchResponse(raw []byte, before, after *corev1.Pod, warnings []string) *admissionv1.AdmissionResponse {
	ops, err := podPatch(raw, before, after)
	if err != nil {
		return deny(http.StatusBadRequest, err.Error())
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return deny(http.StatusInternalServerError, "encoding the patch: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt, Warnings: warnings}
}
