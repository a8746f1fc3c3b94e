// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package admission is gpufrac's admission: a mutating webhook that turns
// KAI-Scheduler GPU-sharing annotations on new Pods into claims (internal/translate/kai),
// and a validating webhook that refuses gpufrac.dev opaque configs the
// driver would refuse later (internal/manifestcheck), with field paths. Both
// answer AdmissionReview v1 over HTTPS; the controller binary serves them.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/packing/podterms"
	"github.com/gpufrac/gpufrac/internal/translate/hami"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// Paths the webhook configurations point at.
const (
	PathMutatePods = "/mutate-pods"
	PathValidate   = "/validate-resources"
)

// Cluster is what admission reads from the cluster, from informer caches
// so an admission never waits on an API call it need not make.
type Cluster interface {
	// GPUMemorySizes are the distinct memory capacities of gpufrac GPUs.
	GPUMemorySizes() []resource.Quantity
	// DeviceClasses are the classes claims may refer to.
	DeviceClasses() []*resourceapi.DeviceClass
	// MaxGPUsPerNode is the most gpufrac GPUs one node publishes (0: none).
	MaxGPUsPerNode() int
	// ClaimSpec is the spec a pod's claim will have: its template's or its
	// claim's, nil when neither exists (yet).
	ClaimSpec(namespace string, claim corev1.PodResourceClaim) *resourceapi.ResourceClaimSpec
}

// GPUTotals is a Cluster that also knows each GPU size's total memory
// (the slices' memoryTotalMiB), which KAI translation computes from
// (DESIGN.md, "What a slice's memory means"). Without it a size stands
// for its own total.
type GPUTotals interface {
	// GPUTotalsMiB maps a size of GPUMemorySizes, in bytes, to its total
	// in MiB.
	GPUTotalsMiB() map[int64]int64
}

// Server answers admission requests.
type Server struct {
	Cluster Cluster
	// Reader serves the read-only lookups of the Pod validation (one
	// guarantee per claim: which pods hold a claim now). The webhooks never
	// write through it: nothing an admission request says creates anything.
	Reader kubernetes.Interface
	// Options for class names; GPU sizes come from Cluster.
	KAI kai.Options
	// HAMi translation's options, for the pods of opted-in namespaces
	// (PathMutateHAMiPods); GPU kinds come from Cluster.
	HAMi hami.Options
	// Claims, when set, serves the packing webhook (packing.go).
	Claims podterms.ClaimSpecs
}

// Handler routes the two webhooks.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PathMutatePods, s.serve(podKinds, s.mutatePod))
	mux.HandleFunc(PathMutateHAMiPods, s.serve(podKinds, s.mutateHAMiPod))
	mux.HandleFunc(PathValidate, s.serve(validatedKinds, s.validate))
	mux.HandleFunc(PathValidatePods, s.serve(podKinds, s.validatePod))
	s.handlePacking(mux)
	return mux
}

type admitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// serve answers the AdmissionReviews of kinds with admit, and every body
// it cannot judge with a denial that says why (readReview).
func (s *Server) serve(kinds []metav1.GroupVersionKind, admit admitFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		review, resp := readReview(w, r, kinds)
		if review == nil {
			review = &admissionv1.AdmissionReview{}
		}
		var uid types.UID
		if review.Request != nil {
			uid = review.Request.UID
		}
		if resp == nil {
			resp = admit(r.Context(), review.Request)
		}
		bounded(resp)
		resp.UID = uid
		review.TypeMeta = metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
		review.Response, review.Request = resp, nil
		out, err := json.Marshal(review)
		if err != nil {
			logger.Error(err, "Encoding an admission response")
			http.Error(w, "encoding the response", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
}

func allow() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

func deny(code int32, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonInvalid, Message: msg,
	}}
}

// mutatePod translates KAI annotations on Pod create. It only computes its
// patch: the ResourceClaimTemplate the patched pod names is created by
// gpufrac-controller's own loop from the pod it sees (internal/controller), so
// no admission request, dry-run or forged, makes this handler create
// anything.
func (s *Server) mutatePod(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	logger := klog.FromContext(ctx)
	pod, done := podOnCreate(req)
	if done != nil {
		return done
	}
	opts := s.KAI
	opts.GPUMemorySizes = s.Cluster.GPUMemorySizes()
	if t, ok := s.Cluster.(GPUTotals); ok {
		opts.GPUTotalsMiB = t.GPUTotalsMiB()
	}
	opts.MaxGPUsPerNode = s.Cluster.MaxGPUsPerNode()
	res, err := kai.Translate(pod, opts)
	if err != nil {
		return deny(http.StatusUnprocessableEntity, err.Error())
	}
	if res != nil {
		// Template names are hashes of their spec, so an existing template
		// of that name is the same one, unless someone made it first with
		// another spec: the pod would run on what they wrote.
		if conflict := s.templateConflict(pod.Namespace, res.Template, "KAI annotations"); conflict != nil {
			return conflict
		}
	}
	after := pod.DeepCopy()
	var warnings []string
	if res != nil {
		after = res.Pod
		warnings = append(warnings, fmt.Sprintf("gpufrac translated KAI GPU-sharing annotations into a claim from ResourceClaimTemplate %s", res.Template.Name))
		warnings = append(warnings, res.Warnings...)
	}
	warnings = append(warnings, s.stripGPUFracContainers(pod, after)...)
	if len(warnings) == 0 {
		return allow()
	}
	resp := patchResponse(req.Object.Raw, pod, after, warnings)
	if res != nil && resp.Allowed {
		logger.V(2).Info("Translated KAI annotations", "pod", klog.KRef(pod.Namespace, podName(pod)), "template", res.Template.Name, "dryRun", req.DryRun != nil && *req.DryRun)
	}
	return resp
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName
}
