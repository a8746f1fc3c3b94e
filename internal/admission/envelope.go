// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/safetext"
)

// The kinds each webhook judges: those its rules in deployments/webhooks.yaml
// match, as the API server names them in a request (the rules list v1
// only, so with matchPolicy Equivalent a request through another version is
// converted to v1 first).
var (
	podKind      = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	resourceKind = func(kind string) metav1.GroupVersionKind {
		return metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: kind}
	}
	podKinds       = []metav1.GroupVersionKind{podKind}
	validatedKinds = []metav1.GroupVersionKind{resourceKind("ResourceClaim"), resourceKind("ResourceClaimTemplate"), resourceKind("DeviceClass")}
)

// readReview reads the AdmissionReview of an admission request and judges
// whether the webhook can judge what it carries: JSON, an AdmissionReview
// v1 request, of a kind in kinds, whose object is of that kind and holds no
// quantity that would take minutes to decode. It returns the review, or,
// when the webhook cannot judge it, the denial that says why: the API
// server shows a denial's reason to the user, while a bare HTTP error
// reaches them as "rejected our request for an unknown reason", or, under
// failurePolicy Ignore, not at all. The review comes back with the denial
// when it was read, so that the denial answers its UID.
func readReview(w http.ResponseWriter, r *http.Request, kinds []metav1.GroupVersionKind) (*admissionv1.AdmissionReview, *admissionv1.AdmissionResponse) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, deny(http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q, not application/json: the API server sends an AdmissionReview as JSON",
			safetext.Cap(r.Header.Get("Content-Type"), 64)))
	}
	body, code, err := readBody(w, r)
	if err != nil {
		return nil, deny(int32(code), err.Error())
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil ||
		(review.APIVersion != "" && review.APIVersion != admissionv1.SchemeGroupVersion.String()) {
		return nil, deny(http.StatusBadRequest, "the body is not an AdmissionReview v1 request")
	}
	req := review.Request
	if !slices.Contains(kinds, req.Kind) {
		return &review, deny(http.StatusBadRequest, fmt.Sprintf("this webhook judges %s, not %s; check the rules of its webhook configuration",
			kindList(kinds), gvk(req.Kind)))
	}
	if len(req.Object.Raw) == 0 {
		return &review, nil
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal(req.Object.Raw, &meta); err != nil {
		return &review, deny(http.StatusBadRequest, "the request's object is not a JSON object: "+err.Error())
	}
	if meta.APIVersion != "" || meta.Kind != "" {
		if got := meta.GroupVersionKind(); got != gvk(req.Kind) {
			return &review, deny(http.StatusBadRequest, fmt.Sprintf("the object is a %s %s, but the request says %s",
				safetext.Cap(meta.APIVersion, 64), safetext.Cap(meta.Kind, 64), gvk(req.Kind)))
		}
	}
	if q := v1alpha1.FindUnboundedQuantityAt(req.Object.Raw); q != nil {
		// Decoding the object would parse it into a resource.Quantity
		// for minutes (v1alpha1.ParseQuantity).
		return &review, deny(http.StatusBadRequest, fmt.Sprintf("%s: the number %s has an exponent outside [-%d, %d]",
			safetext.Cap(q.Path, 256), safetext.Cap(q.Value, 64), v1alpha1.MaxQuantityExponent, v1alpha1.MaxQuantityExponent))
	}
	return &review, nil
}

func gvk(k metav1.GroupVersionKind) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: k.Group, Version: k.Version, Kind: k.Kind}
}

func kindList(kinds []metav1.GroupVersionKind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = gvk(k).String()
	}
	return strings.Join(names, " or ")
}
