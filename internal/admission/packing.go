// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/deviceclass"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

// The packing webhook's adapter: internal/packing/podterms decides which
// pods are fraction pods and what terms they get; this serves it.
const (
	// PathPackPods is the packing webhook's path.
	PathPackPods = "/pack-pods"
)

// packPod adds the packing affinity to fraction pods on create. It never
// refuses a pod: packing is a preference, and its webhook fails open.
func (s *Server) packPod(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || s.Claims == nil {
		return allow()
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return allow()
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if pod.Annotations[podterms.AnnotationPacking] == "false" || len(pod.Spec.ResourceClaims) == 0 {
		return allow()
	}
	if !podterms.IsFractionPod(ctx, &pod, s.Claims, deviceclass.Names(s.Cluster.DeviceClasses(), deviceclass.SelectsGpufrac)) {
		return allow()
	}
	ops := podterms.Patch(&pod)
	if len(ops) == 0 {
		return allow()
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Encoding the packing patch")
		return allow()
	}
	klog.FromContext(ctx).V(4).Info("Added the packing affinity", "pod", klog.KRef(pod.Namespace, podName(&pod)))
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

// handlePacking is the route Handler adds.
func (s *Server) handlePacking(mux *http.ServeMux) {
	mux.HandleFunc(PathPackPods, s.serve(podKinds, s.packPod))
}
