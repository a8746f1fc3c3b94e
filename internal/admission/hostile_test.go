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
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
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

func reviewBody(kind string, raw []byte) []byte {
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "req-1", Kind: metav1.GroupVersionKind{Kind: kind},
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
	for _, tc := range []struct {
		name, cluster, path string
		body                []byte
		status              int    // HTTP status
		want                string // in the denial's message, or in the body when it is no AdmissionReview
	}{
		// Mutating webhook: KAI annotations without bounds.
		{"gpu-memory at the int64 edge", "8 x 141Gi", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "9223372036854775807"})), 200,
			`annotation gpu-memory="9223372036854775807": gpufrac: must be at most 8796093022207 MiB (more overflows a count of bytes)`},
		{"gpu-memory above the cluster's largest GPU", "8 x 141Gi", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "144385"})), 200,
			`annotation gpu-memory="144385": gpufrac: 144385Mi must be at most 141Gi, the largest GPU the cluster publishes`},
		{"gpu-memory with no GPU published", "no GPUs", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "200000"})), 200,
			`annotation gpu-memory="200000": gpufrac: 200000Mi must be at most 180Gi, the largest GPU gpufrac knows (b200 in its simulated catalog`},
		{"gpu-fraction-num-devices 1000000000", "8 x 141Gi", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1000000000"})), 200,
			`annotation gpu-fraction-num-devices="1000000000": gpufrac: must be at most 8, the most gpufrac GPUs one node in the cluster publishes`},
		{"gpu-fraction-num-devices 33 with no GPU published", "no GPUs", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "1024", "gpu-fraction-num-devices": "33"})), 200,
			`annotation gpu-fraction-num-devices="33": gpufrac: must be at most 32, the most devices one claim's allocation holds`},
		{"gpu-fraction 1e-300", "8 x 141Gi", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "1e-300"})), 200,
			`annotation gpu-fraction="1e-300": gpufrac: no GPU size the cluster publishes (80Gi, 141Gi) can hold this request`},
		{"gpu-fraction 1", "8 x 141Gi", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "1"})), 200,
			`annotation gpu-fraction="1": gpu-fraction annotation value must be a positive number smaller than 1.0`},
		{"a 300 KiB annotation value with escapes", "8 x 141Gi", admission.PathMutatePods, reviewBody("Pod", hostilePod("p", map[string]string{"gpu-memory": "\x1b[2J" + huge})), 200,
			`annotation gpu-memory="\x1b[2J999`},
		{"a container name with escapes", "8 x 141Gi", admission.PathMutatePods,
			reviewBody("Pod", hostilePod("p", map[string]string{"gpu-fraction": "0.5", "gpu-fraction-container-name": "evil\x1b]0;t\a"})), 200,
			`container with name evil\x1b]0;t\x07 not found for fraction request`},
		// Validating webhook: opaque configs and requests without bounds.
		{"memoryLimit 1e30", "8 x 141Gi", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "1e30", "")), 200,
			`memoryLimit: Invalid value: "1e30": must be at most 141Gi, the largest GPU the cluster publishes`},
		{"memoryLimit 1e30 with no GPU published", "no GPUs", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "1e30", "")), 200,
			`memoryLimit: Invalid value: "1e30": must be at most 180Gi, the largest GPU gpufrac knows (b200 in its simulated catalog`},
		{"memoryLimit negative", "8 x 141Gi", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "-1", "")), 200,
			`memoryLimit: Invalid value: "-1": must be greater than zero`},
		{"memoryLimit above the largest GPU", "8 x 141Gi", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "142Gi", "")), 200,
			`memoryLimit: Invalid value: "142Gi": must be at most 141Gi, the largest GPU the cluster publishes`},
		{"memory request negative", "8 x 141Gi", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c", "-1Gi", "10Gi", "")), 200,
			`spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: "-1Gi": must be greater than zero`},
		{"3,000 unknown fields", "8 x 141Gi", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c", "10Gi", "20Gi", many)), 200,
			`ResourceClaim/c: spec.devices.config[0].opaque.parameters: Forbidden: unknown field "f1014"; ... and 2980 more problems, not listed`},
		{"a claim name with escapes", "8 x 141Gi", admission.PathValidate, reviewBody("ResourceClaim", hostileClaim("c\x1b[31m\u202e", "10Gi", "0", "")), 200,
			`ResourceClaim/c\x1b[31m\u202e: spec.devices.config[0].opaque.parameters.memoryLimit`},
		// Exponents that took minutes of CPU to parse or compare.
		{"a KAI memory request of 1E-999999999", "8 x 141Gi", admission.PathMutatePods,
			reviewBody("Pod", hostilePod("p", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1E-999999999"})), 200,
			`annotation nvidia.com/container.main.gpu-memory.request="1E-999999999": gpufrac: exponent -999999999 is outside [-30, 30]`},
		{"a pod's cpu of 1E-999999999, sent directly", "8 x 141Gi", admission.PathMutatePods,
			reviewBody("Pod", []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"1E-999999999"}}}]}}`)),
			http.StatusBadRequest, "the number 1E-999999999 has an exponent outside [-30, 30]"},
		{"a claim's memory of 1e999999999, sent directly", "8 x 141Gi", admission.PathValidate,
			reviewBody("ResourceClaim", hostileClaim("c", "1e999999999", "10Gi", "")), http.StatusBadRequest, "the number 1e999999999 has an exponent outside [-30, 30]"},
		// Either webhook: bodies.
		{"a body over 8 MiB", "8 x 141Gi", admission.PathValidate, bytes.Repeat([]byte(" "), 9<<20), http.StatusRequestEntityTooLarge,
			"the request body is over 8 MiB"},
		{"not an AdmissionReview", "8 x 141Gi", admission.PathMutatePods, []byte(`{"kind":"Pod"}`), http.StatusBadRequest,
			"the body is not an AdmissionReview v1 request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, resp, body := post(t, servers[tc.cluster].URL+tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", status, tc.status, trim(body))
			}
			if status != http.StatusOK {
				if !strings.Contains(body, tc.want) {
					t.Errorf("body %q lacks %q", trim(body), tc.want)
				}
				return
			}
			if resp == nil || resp.Allowed || resp.Result == nil {
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
