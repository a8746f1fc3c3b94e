// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission"
)

func hostileClaim(name, memory, limit string, extra string) []byte {
	quoted, _ := json.Marshal(name)
	return []byte(fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":%s,"namespace":"team"},`+
		`"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpufrac.dev","capacity":{"requests":{"memory":%q}}}}],`+
		`"config":[{"opaque":{"driver":"gpufrac.dev","parameters":{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":%q%s}}}]}}}`,
		quoted, memory, limit, extra))
}

func hostilePod(name string, annotations map[string]string) []byte {
	p := kaiPod(annotations)
	p.Name, p.Namespace = name, "kube-system"
	raw, _ := json.Marshal(p)
	return raw
}

// post sends body as is and returns the status and the decoded response
// (nil when the body is not an AdmissionReview).
func post(t *testing.T, url string, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	return postAs(t, url, "application/json", body)
}

// postAs is post with the Content-Type given.
func postAs(t *testing.T, url, contentType string, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if json.Unmarshal(raw, &out) != nil || out.Response == nil {
		return resp.StatusCode, nil, string(raw)
	}
	return resp.StatusCode, out.Response, string(raw)
}

// kinds are the kinds the API server names in the requests it sends the
// webhooks (their rules match v1 only).
var kinds = map[string]metav1.GroupVersionKind{
	"Pod":                   {Version: "v1", Kind: "Pod"},
	"ConfigMap":             {Version: "v1", Kind: "ConfigMap"},
	"ResourceClaim":         {Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
	"ResourceClaimTemplate": {Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"},
	"DeviceClass":           {Group: "resource.k8s.io", Version: "v1", Kind: "DeviceClass"},
}

func reviewBody(kind string, raw []byte) []byte {
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "req-1", Kind: kinds[kind],
			Namespace: "kube-system", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(true)},
	})
	return body
}

// TestHostileAdmission: what anyone who reaches the webhook's port may
// send (the port is not authenticated), over real HTTP to the handler,
// each with the refusal it must meet, and none with a side effect: the
// server's API client (a fake that records every call) sees reads only.
func TestHostileAdmission(t *testing.T) {
	client := fake.NewClientset()
	withGPUs := &admission.Server{Cluster: staticCluster{sizes: []resource.Quantity{resource.MustParse("80Gi"), resource.MustParse("141Gi")}, maxGPUs: 8}, Reader: client}
	noGPUs := &admission.Server{Cluster: staticCluster{}, Reader: client}
	servers := map[string]*httptest.Server{}
	for name, s := range map[string]*admission.Server{"8 x 141Gi": withGPUs, "no GPUs": noGPUs} {
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		servers[name] = srv
	}
	many := ""
	for i := range 3000 {
		many += fmt.Sprintf(`,"f%d":1`, i)
	}
	huge := strings.Repeat("9", 300<<10)
	otherDriver := []byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"nic","namespace":"team","annotations":{"sizeLimit":"1e999999999"}},` +
		`"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpufrac.dev","capacity":{"requests":{"memory":"10Gi"}}}}],` +
		`"config":[{"opaque":{"driver":"gpufrac.dev","parameters":{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"20Gi"}}},` +
		`{"opaque":{"driver":"nic.example.com","parameters":{"requests":{"bandwidth":"1e999999999"},"sizeLimit":"1E-999999999"}}}]}}}`)
	noRequest := []byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"team"},` +
		`"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpufrac.dev"}}],` +
		`"config":[{"opaque":{"driver":"gpufrac.dev","parameters":{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"20Gi"}}}]}}}`)
	sizeLimitAnnotation := hostilePod("p", map[string]string{"gpu-memory": "1024", "sizeLimit": "1e999999999"})
	nodeSelector := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"nodeSelector":{"sizeLimit":"1e999999999"},"containers":[{"name":"main"}]}}`)
	allocated := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"main"}]},` +
		`"status":{"containerStatuses":[{"name":"main","allocatedResources":{"cpu":"1e999999999"}}]}}`)
	secret := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"p"},"data":{"x":"eA=="}}`)
	longName := strings.Repeat("c", 100<<10)
	for _, tc := range []struct {
		name, cluster, path string
		body                []byte
		contentType         string // "" = application/json
		allowed             bool
		want                string // in the denial's message
	}{
		// Mutating webhook: KAI annotations without bounds.
		{name: "gpu-memory at the int64 edge", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "9223372036854775807"})),
			want: `annotation gpu-memory="9223372036854775807": gpufrac: must be at most 8796093022207 MiB (more overflows a count of bytes)`},
		{name: "gpu-memory above the cluster's largest GPU", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "144385"})),
			want: `annotation gpu-memory="144385": gpufrac: 144385Mi must be at most 141Gi, the largest GPU the cluster publishes`},
		{name: "gpu-memory with no GPU published", cluster: "no GPUs", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "200000"})),
			want: `annotation gpu-memory="200000": gpufrac: 200000Mi must be at most 180Gi, the largest GPU gpufrac knows (b200 in its simulated catalog`},
		// KAI's mutation rewrites gpu-memory as an NvFractions request;
		// the refusal names what the user wrote, not that.
		{name: "gpu-memory 0", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "0"})),
			want: `annotation gpu-memory="0": `},
		{name: "gpu-fraction-num-devices 1000000000", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1000000000"})),
			want: `annotation gpu-fraction-num-devices="1000000000": gpufrac: must be at most 8, the most gpufrac GPUs one node in the cluster publishes`},
		{name: "gpu-fraction-num-devices 33 with no GPU published", cluster: "no GPUs", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "1024", "gpu-fraction-num-devices": "33"})),
			want: `annotation gpu-fraction-num-devices="33": gpufrac: must be at most 32, the most devices one claim's allocation holds`},
		{name: "gpu-fraction 1e-300", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "1e-300"})),
			want: `annotation gpu-fraction="1e-300": KAI's binder refuses this pod: invalid received gpu portion "0.00"`},
		{name: "gpu-fraction 1", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "1"})),
			want: `annotation gpu-fraction="1": gpu-fraction annotation value must be a positive number smaller than 1.0`},
		{name: "a 300 KiB annotation value with escapes", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "\x1b[2J" + huge})),
			want: `annotation gpu-memory="\x1b[2J999`},
		{name: "a container name with escapes", cluster: "8 x 141Gi", path: admission.PathMutatePods,
			body: reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "0.5", "gpu-fraction-container-name": "evil\x1b]0;t\a"})),
			want: `container with name evil\x1b]0;t\x07 not found for fraction request`},
		// Validating webhook: opaque configs and requests without bounds.
		{name: "memoryLimit 1e30", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "1e30", "")),
			want: `memoryLimit: Invalid value: "1e30": must be at most 141Gi, the largest GPU the cluster publishes`},
		{name: "memoryLimit 1e30 with no GPU published", cluster: "no GPUs", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "1e30", "")),
			want: `memoryLimit: Invalid value: "1e30": must be at most 180Gi, the largest GPU gpufrac knows (b200 in its simulated catalog`},
		{name: "memoryLimit negative", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "-1", "")),
			want: `memoryLimit: Invalid value: "-1": must be greater than zero`},
		{name: "memoryLimit above the largest GPU", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "142Gi", "")),
			want: `memoryLimit: Invalid value: "142Gi": must be at most 141Gi, the largest GPU the cluster publishes`},
		// The request defaults to the whole GPU: a limit below it can never
		// be prepared.
		{name: "memoryLimit with no memory request", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", noRequest),
			want: `spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "20Gi": needs a memory request on request gpu`},
		{name: "memory request negative", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c", "-1Gi", "10Gi", "")),
			want: `spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: "-1Gi": must be greater than zero`},
		{name: "3,000 unknown fields", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "20Gi", many)),
			want: `ResourceClaim/c: spec.devices.config[0].opaque.parameters: Forbidden: unknown field "f1014"; ... and 2980 more problems, not listed`},
		{name: "a claim name with escapes", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", hostileClaim("c\x1b[31m\u202e", "10Gi", "0", "")),
			want: `ResourceClaim/c\x1b[31m\u202e: spec.devices.config[0].opaque.parameters.memoryLimit`},
		// Exponents that took minutes of CPU to parse or compare: refused
		// in an AdmissionReview, which the API server shows the user.
		{name: "a KAI memory request of 1E-999999999", cluster: "8 x 141Gi", path: admission.PathMutatePods,
			body: reviewBody("Pod", hostilePod("p", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1E-999999999"})),
			want: `annotation nvidia.com/container.main.gpu-memory.request="1E-999999999": gpufrac: exponent -999999999 is outside [-30, 30]`},
		{name: "a pod's cpu of 1E-999999999, sent directly", cluster: "8 x 141Gi", path: admission.PathMutatePods,
			body: reviewBody("Pod", []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"1E-999999999"}}}]}}`)),
			want: "spec.containers[0].resources.requests[cpu]: the number 1E-999999999 has an exponent outside [-30, 30]"},
		{name: "a pod status's allocated cpu of 1e999999999", cluster: "8 x 141Gi", path: admission.PathValidatePods, body: reviewBody("Pod", allocated),
			want: "status.containerStatuses[0].allocatedResources[cpu]: the number 1e999999999 has an exponent outside [-30, 30]"},
		{name: "a claim's memory of 1e999999999, sent directly", cluster: "8 x 141Gi", path: admission.PathValidate,
			body: reviewBody("ResourceClaim", hostileClaim("c", "1e999999999", "10Gi", "")),
			want: "spec.devices.requests[0].exactly.capacity.requests[memory]: the number 1e999999999 has an exponent outside [-30, 30]"},
		// What is not gpufrac's to decode is not judged as a quantity.
		{name: "another driver's parameters and an annotation named sizeLimit", cluster: "8 x 141Gi", path: admission.PathValidate,
			body: reviewBody("ResourceClaim", otherDriver), allowed: true},
		{name: "a KAI pod with an annotation named sizeLimit", cluster: "8 x 141Gi", path: admission.PathMutatePods,
			body: reviewBody("Pod", sizeLimitAnnotation), allowed: true},
		{name: "a node selector named sizeLimit", cluster: "8 x 141Gi", path: admission.PathValidatePods,
			body: reviewBody("Pod", nodeSelector), allowed: true},
		// Claim names no API server would accept are not looked up.
		{name: "a claim name of 100 KiB", cluster: "8 x 141Gi", path: admission.PathValidatePods,
			body: reviewBody("Pod", []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"resourceClaims":[{"name":"gpu","resourceClaimName":"`+longName+`"}],`+
				`"containers":[{"name":"main","resources":{"claims":[{"name":"gpu"}]}}]}}`)),
			want: `spec.resourceClaims[0].resourceClaimName: Invalid value: "cccc`},
		// Either webhook: bodies it cannot judge get a denial with the
		// reason, never a bare HTTP error.
		{name: "a body over 8 MiB", cluster: "8 x 141Gi", path: admission.PathValidate, body: bytes.Repeat([]byte(" "), 9<<20),
			want: "the request body is over 8 MiB"},
		{name: "not an AdmissionReview", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: []byte(`{"kind":"Pod"}`),
			want: "the body is not an AdmissionReview v1 request"},
		{name: "a body sent as text/plain", cluster: "8 x 141Gi", path: admission.PathValidatePods, body: reviewBody("Pod", nodeSelector), contentType: "text/plain",
			want: `Content-Type "text/plain", not application/json`},
		{name: "a ConfigMap sent to the pod webhook", cluster: "8 x 141Gi", path: admission.PathValidatePods,
			body: reviewBody("ConfigMap", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p"}}`)),
			want: "this webhook judges /v1, Kind=Pod, not /v1, Kind=ConfigMap"},
		{name: "a Secret sent as a Pod", cluster: "8 x 141Gi", path: admission.PathMutatePods, body: reviewBody("Pod", secret),
			want: "the object is a v1 Secret, but the request says /v1, Kind=Pod"},
		{name: "a Pod sent as a ResourceClaim", cluster: "8 x 141Gi", path: admission.PathValidate, body: reviewBody("ResourceClaim", nodeSelector),
			want: "the object is a v1 Pod, but the request says resource.k8s.io/v1, Kind=ResourceClaim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			status, resp, body := postAs(t, servers[tc.cluster].URL+tc.path, ct, tc.body)
			if status != http.StatusOK || resp == nil {
				t.Fatalf("HTTP %d, want 200 with an AdmissionReview: %s", status, trim(body))
			}
			if tc.allowed {
				if !resp.Allowed {
					t.Fatalf("refused, want allowed: %v", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("allowed, want a denial: %s", trim(body))
			}
			msg := resp.Result.Message
			if !strings.Contains(msg, tc.want) {
				t.Errorf("message lacks %q:\n%s", tc.want, trim(msg))
			}
			if len(msg) > admission.MaxMessageBytes+64 {
				t.Errorf("message of %d bytes, want at most %d", len(msg), admission.MaxMessageBytes)
			}
			if strings.ContainsAny(msg, "\x1b\a\u202e") {
				t.Errorf("a raw control character in the message: %q", trim(msg))
			}
		})
	}
	for _, a := range client.Actions() {
		if get, ok := a.(clienttesting.GetAction); ok && len(get.GetName()) > 253 {
			t.Errorf("asked the API server for a %s named with %d bytes", get.GetResource().Resource, len(get.GetName()))
		}
	}
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("an admission request caused %s %s", v, a.GetResource().Resource)
		}
	}
}

// TestAdmissionHasNoSideEffects: 200 requests, dry-run or not, in a
// namespace the webhook configuration excludes (kube-system), each a pod
// whose translation names a template: the webhook only answers; nothing is
// created through its client.
func TestAdmissionHasNoSideEffects(t *testing.T) {
	client := fake.NewClientset()
	s := &admission.Server{Cluster: staticCluster{sizes: []resource.Quantity{resource.MustParse("141Gi")}, maxGPUs: 8}, Reader: client}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	for i := range 200 {
		p := kaiPod(map[string]string{"gpu-memory": fmt.Sprint(1024 + i)})
		p.Namespace = "kube-system"
		raw, _ := json.Marshal(p)
		var review admissionv1.AdmissionReview
		_ = json.Unmarshal(reviewBody("Pod", raw), &review)
		review.Request.DryRun = ptr.To(i%2 == 0)
		body, _ := json.Marshal(review)
		status, resp, _ := post(t, srv.URL+admission.PathMutatePods, body)
		if status != http.StatusOK || resp == nil || !resp.Allowed || resp.Patch == nil {
			t.Fatalf("request %d: HTTP %d %+v", i, status, resp)
		}
	}
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("an admission request caused %s %s", v, a.GetResource().Resource)
		}
	}
	if l, err := client.ResourceV1().ResourceClaimTemplates("kube-system").List(t.Context(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("templates in kube-system after 200 admissions: %v %v", l, err)
	}
}

func trim(s string) string {
	if len(s) > 1500 {
		return s[:1000] + " [...] " + s[len(s)-500:]
	}
	return s
}
