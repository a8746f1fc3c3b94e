package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpufrac/gpufrac/pkg/webhook"
)

type staticCluster struct {
	sizes   []resource.Quantity
	classes []*resourceapi.DeviceClass
}

func (c staticCluster) GPUMemorySizes() []resource.Quantity       { return c.sizes }
func (c staticCluster) DeviceClasses() []*resourceapi.DeviceClass { return c.classes }

type eventLog struct{ events []string }

func (e *eventLog) Translated(pod *corev1.Pod, templates []string) {
	e.events = append(e.events, pod.Name+": "+strings.Join(templates, ","))
}

func review(t *testing.T, srv *httptest.Server, path, kind string, op admissionv1.Operation, obj any) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "req-1", Kind: metav1.GroupVersionKind{Kind: kind},
			Namespace: "team", Operation: op, Object: runtime.RawExtension{Raw: raw}},
	})
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.UID != "req-1" {
		t.Fatalf("response %+v does not answer the request", out.Response)
	}
	return out.Response
}

func newServer(t *testing.T) (*httptest.Server, *fake.Clientset, *eventLog) {
	client := fake.NewClientset()
	events := &eventLog{}
	s := &webhook.Server{Client: client, Cluster: staticCluster{sizes: []resource.Quantity{resource.MustParse("141Gi")}}, Events: events}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, client, events
}

func kaiPod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

func TestMutateTranslatesAndCreatesTemplates(t *testing.T) {
	srv, client, events := newServer(t)
	for range 2 { // a retried admission converges on the same template
		resp := review(t, srv, webhook.PathMutatePods, "Pod", admissionv1.Create, kaiPod(map[string]string{"gpu-fraction": "0.5"}))
		if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("response %+v", resp)
		}
		var ops []struct {
			Op, Path string
			Value    json.RawMessage
		}
		if err := json.Unmarshal(resp.Patch, &ops); err != nil {
			t.Fatal(err)
		}
		var spec corev1.PodSpec
		if len(ops) != 2 || ops[0].Path != "/spec" || json.Unmarshal(ops[0].Value, &spec) != nil {
			t.Fatalf("patch %s", resp.Patch)
		}
		if len(spec.ResourceClaims) != 1 || spec.Containers[0].Resources.Claims[0].Name != spec.ResourceClaims[0].Name {
			t.Errorf("patched spec %+v", spec)
		}
	}
	tmpls, err := client.ResourceV1().ResourceClaimTemplates("team").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(tmpls.Items) != 1 {
		t.Fatalf("templates %v %v, want one in the pod's namespace", tmpls, err)
	}
	if len(events.events) != 2 || !strings.HasPrefix(events.events[0], "llm: gpufrac-kai-") {
		t.Errorf("events %v", events.events)
	}
}

func TestMutateRefusesWithTheAnnotation(t *testing.T) {
	srv, client, _ := newServer(t)
	resp := review(t, srv, webhook.PathMutatePods, "Pod", admissionv1.Create, kaiPod(map[string]string{"gpu-fraction": "1.5"}))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 422 ||
		resp.Result.Message != `cannot translate KAI GPU-sharing annotations: annotation gpu-fraction="1.5": must be a number greater than 0 and less than 1 (a portion of one GPU)` {
		t.Errorf("response %+v", resp.Result)
	}
	if tmpls, _ := client.ResourceV1().ResourceClaimTemplates("team").List(t.Context(), metav1.ListOptions{}); len(tmpls.Items) != 0 {
		t.Error("a refused pod created templates")
	}
}

func TestMutateLeavesOtherPodsAlone(t *testing.T) {
	srv, _, _ := newServer(t)
	for _, p := range []*corev1.Pod{kaiPod(nil), kaiPod(map[string]string{"app": "web"})} {
		if resp := review(t, srv, webhook.PathMutatePods, "Pod", admissionv1.Create, p); !resp.Allowed || resp.Patch != nil {
			t.Errorf("pod without KAI annotations: %+v", resp)
		}
	}
}

func TestValidateRefusesBadConfigsWithPaths(t *testing.T) {
	srv, _, _ := newServer(t)
	claim := map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
		"metadata": map[string]any{"name": "c", "namespace": "team"},
		"spec": map[string]any{"devices": map[string]any{
			"requests": []any{map[string]any{"name": "gpu", "exactly": map[string]any{
				"deviceClassName": "gpufrac.dev", "capacity": map[string]any{"requests": map[string]any{"memory": "40Gi"}}}}},
			"config": []any{map[string]any{"requests": []any{"gpu"}, "opaque": map[string]any{"driver": "gpufrac.dev",
				"parameters": map[string]any{"apiVersion": "gpufrac.dev/v1alpha1", "kind": "FractionConfig", "memoryLimit": "30Gi"}}}},
		}},
	}
	resp := review(t, srv, webhook.PathValidate, "ResourceClaim", admissionv1.Create, claim)
	want := `invalid gpufrac.dev configuration: ResourceClaim/c: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi`
	if resp.Allowed || resp.Result.Message != want {
		t.Errorf("got %+v\nwant %s", resp.Result, want)
	}
	claim["spec"].(map[string]any)["devices"].(map[string]any)["config"].([]any)[0].(map[string]any)["opaque"].(map[string]any)["parameters"].(map[string]any)["memoryLimit"] = "60Gi"
	if resp := review(t, srv, webhook.PathValidate, "ResourceClaim", admissionv1.Create, claim); !resp.Allowed {
		t.Errorf("valid claim refused: %+v", resp.Result)
	}
}
