// Package webhook is gpufrac's admission: a mutating webhook that turns
// KAI-Scheduler GPU-sharing annotations on new Pods into claims (pkg/kai),
// and a validating webhook that refuses gpufrac.dev opaque configs the
// driver would refuse later (pkg/manifestcheck), with field paths. Both
// answer AdmissionReview v1 over HTTPS; the controller binary serves them.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/pkg/kai"
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
}

// Events records what the mutation did on the pod.
type Events interface {
	Translated(pod *corev1.Pod, templates []string)
}

// Server answers admission requests.
type Server struct {
	Client  kubernetes.Interface
	Cluster Cluster
	Events  Events
	// Options for class names; GPU sizes come from Cluster.
	KAI kai.Options
	// Claims, when set, serves the packing webhook (packing.go).
	Claims ClaimSpecs
}

// Handler routes the two webhooks.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PathMutatePods, s.serve(s.mutatePod))
	mux.HandleFunc(PathValidate, s.serve(s.validate))
	s.handlePacking(mux)
	return mux
}

type admitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

func (s *Server) serve(admit admitFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "the body is not an AdmissionReview v1 request", http.StatusBadRequest)
			return
		}
		resp := admit(r.Context(), review.Request)
		resp.UID = review.Request.UID
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

// mutatePod translates KAI annotations on Pod create.
func (s *Server) mutatePod(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	logger := klog.FromContext(ctx)
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
	opts := s.KAI
	opts.GPUMemorySizes = s.Cluster.GPUMemorySizes()
	res, err := kai.Translate(&pod, opts)
	if err != nil {
		return deny(http.StatusUnprocessableEntity, err.Error())
	}
	if res == nil {
		return allow()
	}
	var names []string
	for _, tmpl := range res.Templates {
		if err := s.ensureTemplate(ctx, tmpl); err != nil {
			// Retryable: the API server retries the pod's create.
			return deny(http.StatusInternalServerError, err.Error())
		}
		names = append(names, tmpl.Name)
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec", "value": res.Pod.Spec},
		// "add" replaces an existing member, so it works with or without
		// annotations present.
		{"op": "add", "path": "/metadata/annotations", "value": res.Pod.Annotations},
	})
	if err != nil {
		return deny(http.StatusInternalServerError, "encoding the patch: "+err.Error())
	}
	if s.Events != nil {
		s.Events.Translated(res.Pod, names)
	}
	logger.V(2).Info("Translated KAI annotations", "pod", klog.KRef(pod.Namespace, podName(&pod)), "templates", names)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt,
		Warnings: []string{fmt.Sprintf("gpufrac translated KAI GPU-sharing annotations into ResourceClaimTemplates %v", names)}}
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName
}

// ensureTemplate creates a template if absent. Names are hashes of the
// spec, so an existing one is the same template: concurrent and retried
// admissions converge.
func (s *Server) ensureTemplate(ctx context.Context, tmpl *resourceapi.ResourceClaimTemplate) error {
	_, err := s.Client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(ctx, tmpl, metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", tmpl.Namespace, tmpl.Name, err)
}
