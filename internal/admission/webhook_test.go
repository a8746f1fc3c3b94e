// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

type staticCluster struct {
	sizes     []resource.Quantity
	classes   []*resourceapi.DeviceClass
	maxGPUs   int
	templates map[string]*resourceapi.ResourceClaimSpec
}

func (c staticCluster) ClaimSpec(_ string, pc corev1.PodResourceClaim) *resourceapi.ResourceClaimSpec {
	if pc.ResourceClaimTemplateName == nil {
		return nil
	}
	return c.templates[*pc.ResourceClaimTemplateName]
}

func (c staticCluster) GPUMemorySizes() []resource.Quantity       { return c.sizes }
func (c staticCluster) DeviceClasses() []*resourceapi.DeviceClass { return c.classes }
func (c staticCluster) MaxGPUsPerNode() int                       { return c.maxGPUs }

func reviewRaw(t *testing.T, srv *httptest.Server, path, kind string, op admissionv1.Operation, raw []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "req-1", Kind: kinds[kind],
			Namespace: "team", Operation: op, Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(true)},
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

func review(t *testing.T, srv *httptest.Server, path, kind string, op admissionv1.Operation, obj any) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return reviewRaw(t, srv, path, kind, op, raw)
}

// newServer: the webhook is given no API client at all, so no admission
// request, dry-run or forged, can create anything through it.
func newServer(t *testing.T) *httptest.Server {
	s := &admission.Server{Cluster: staticCluster{sizes: []resource.Quantity{resource.MustParse("141Gi")}, maxGPUs: 8}}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func kaiPod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

type op struct {
	Op, Path string
	Value    json.RawMessage
}

func opsOf(t *testing.T, resp *admissionv1.AdmissionResponse) []op {
	t.Helper()
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v", resp)
	}
	var ops []op
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	return ops
}

// TestMutatePatchesOnlyWhatItChanges: a pod as a newer API server would
// send it, with fields k8s.io/api v0.37.2 does not know, goes through the
// webhook; the patch names only the fields the translation changes, and
// applied as the API server applies it (json-patch v4) every unknown field
// survives.
func TestMutatePatchesOnlyWhatItChanges(t *testing.T) {
	srv := newServer(t)
	raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"llm","namespace":"team",` +
		`"annotations":{"gpu-memory":"20000","a/b~c":"x"},"futureMeta":{"k":"v"}},` +
		`"spec":{"schedulerName":"kai-scheduler","futureSpecField":{"enabled":true},` +
		`"containers":[{"name":"main","image":"busybox","futureContainerField":[1,2],` +
		`"env":[{"name":"KEEP","value":"1"},{"name":"NVIDIA_GPU_MEMORY_LIMIT","value":"999999"},{"name":"ALSO","value":"2"}]},` +
		`{"name":"side","image":"busybox","resources":{"limits":{"cpu":"1"},"futureResources":"y"}}]},` +
		`"status":{"futureStatus":1}}`)
	resp := reviewRaw(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, raw)
	ops := opsOf(t, resp)
	var paths []string
	for _, o := range ops {
		paths = append(paths, o.Op+" "+o.Path)
	}
	want := []string{
		"add /metadata/annotations/gpufrac.dev~1kai-inputs",
		"add /metadata/annotations/gpufrac.dev~1kai-templates",
		"add /metadata/labels",
		"add /spec/resourceClaims",
		"add /spec/containers/0/resources",
		"remove /spec/containers/0/env/1",
		"replace /spec/schedulerName",
	}
	if strings.Join(paths, "\n") != strings.Join(want, "\n") {
		t.Fatalf("patch operations\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("the API server could not apply the patch: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"metadata.futureMeta.k", "spec.futureSpecField.enabled", "spec.containers.0.futureContainerField",
		"spec.containers.1.resources.futureResources", "spec.containers.1.resources.limits.cpu", "status.futureStatus", "metadata.annotations.a/b~c"} {
		if lookup(got, path) == nil {
			t.Errorf("%s did not survive the patch", path)
		}
	}
	if s := lookup(got, "spec.schedulerName"); s != "default-scheduler" {
		t.Errorf("schedulerName %v", s)
	}
	env, _ := lookup(got, "spec.containers.0.env").([]any)
	if len(env) != 2 || env[0].(map[string]any)["name"] != "KEEP" || env[1].(map[string]any)["name"] != "ALSO" {
		t.Errorf("env after the patch: %v", env)
	}
	if claims := lookup(got, "spec.containers.0.resources.claims"); claims == nil {
		t.Error("the container did not get its claim")
	}
	if len(resp.Warnings) != 3 || !strings.Contains(strings.Join(resp.Warnings, "\n"), "removed NVIDIA_GPU_MEMORY_LIMIT") {
		t.Errorf("warnings %v", resp.Warnings)
	}
}

func lookup(v any, path string) any {
	for _, part := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// TestMutateAppendsToExistingFields: existing claims, annotations and
// labels are appended to, never replaced.
func TestMutateAppendsToExistingFields(t *testing.T) {
	srv := newServer(t)
	p := kaiPod(map[string]string{"gpu-fraction": "0.5"})
	p.Labels = map[string]string{"app": "llm"}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "other", ResourceClaimName: ptr.To("x")}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "other"}}
	ops := opsOf(t, review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, p))
	var paths []string
	for _, o := range ops {
		paths = append(paths, o.Op+" "+o.Path)
	}
	want := "add /metadata/annotations/gpufrac.dev~1kai-inputs\nadd /metadata/annotations/gpufrac.dev~1kai-templates\n" +
		"add /metadata/labels/gpufrac.dev~1kai-translated\nadd /spec/resourceClaims/-\nadd /spec/containers/0/resources/claims/-"
	if strings.Join(paths, "\n") != want {
		t.Errorf("patch operations\n%s\nwant\n%s", strings.Join(paths, "\n"), want)
	}
}

func TestMutateRefusesWithKAIsReason(t *testing.T) {
	srv := newServer(t)
	for annotations, want := range map[string]string{
		`{"gpu-fraction":"1.5"}`:                               `cannot translate KAI GPU-sharing annotations: annotation gpu-fraction="1.5": gpu-fraction annotation value must be a positive number smaller than 1.0`,
		`{"gpu-memory":"1024","gpu-fraction-num-devices":"9"}`: `cannot translate KAI GPU-sharing annotations: annotation gpu-fraction-num-devices="9": gpufrac: must be at most 8, the most gpufrac GPUs one node in the cluster publishes`,
	} {
		var a map[string]string
		_ = json.Unmarshal([]byte(annotations), &a)
		resp := review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, kaiPod(a))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != 422 || resp.Result.Message != want {
			t.Errorf("%s: response %+v", annotations, resp.Result)
		}
	}
}

// TestMutateStripsNVIDIAVariablesFromGPUFracContainers: a pod that uses a
// gpufrac claim directly loses the NVIDIA variables it set itself (memory,
// visible devices, driver capabilities) on the containers and init
// containers that use the claim, with a warning each naming why; a
// container with another driver's claim keeps them, and so does a
// gpufrac container's unrelated variable.
func TestMutateStripsNVIDIAVariablesFromGPUFracContainers(t *testing.T) {
	exact := func(class string) *resourceapi.ResourceClaimSpec {
		return &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}}
	}
	cluster := staticCluster{
		classes: []*resourceapi.DeviceClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "gpufrac.dev"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`}}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}}},
		},
		templates: map[string]*resourceapi.ResourceClaimSpec{"share": exact("gpufrac.dev"), "whole": exact("gpu.nvidia.com")},
	}
	srv := httptest.NewServer((&admission.Server{Cluster: cluster}).Handler())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, value, why string
		init             bool
		strip            bool
	}{
		{name: "NVIDIA_GPU_MEMORY_LIMIT", value: "999999", strip: true, why: "the GPU memory of a gpufrac claim is set by the driver"},
		{name: "NVIDIA_GPU_MEMORY_REQUEST", value: "1", strip: true, why: "the GPU memory of a gpufrac claim is set by the driver"},
		{name: "NVIDIA_VISIBLE_DEVICES", value: "all", strip: true, why: "come from its CDI spec, not from the pod"},
		{name: "NVIDIA_VISIBLE_DEVICES", value: "GPU-0123", init: true, strip: true, why: "come from its CDI spec, not from the pod"},
		{name: "NVIDIA_DRIVER_CAPABILITIES", value: "all", strip: true, why: "come from its CDI spec, not from the pod"},
		{name: "NVIDIA_REQUIRE_CUDA", value: "cuda>=12.0", strip: false},
		{name: "CUDA_VISIBLE_DEVICES", value: "0", strip: false},
	} {
		t.Run(fmt.Sprintf("%s=%s init=%t", tc.name, tc.value, tc.init), func(t *testing.T) {
			env := []corev1.EnvVar{{Name: tc.name, Value: tc.value}, {Name: "KEEP", Value: "1"}}
			p := kaiPod(nil)
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: ptr.To("share")}, {Name: "b", ResourceClaimTemplateName: ptr.To("whole")}}
			main := corev1.Container{Name: "main", Env: env, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "a"}}}}
			p.Spec.Containers = []corev1.Container{
				main,
				{Name: "other", Env: env, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "b"}}}},
			}
			path := "/spec/containers/0/env/0"
			if tc.init {
				p.Spec.InitContainers = []corev1.Container{main}
				p.Spec.Containers[0].Env = nil
				path = "/spec/initContainers/0/env/0"
			}
			resp := review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, p)
			if !tc.strip {
				if !resp.Allowed || len(resp.Patch) != 0 || len(resp.Warnings) != 0 {
					t.Errorf("a variable gpufrac leaves alone was touched: allowed %t, patch %s, warnings %v", resp.Allowed, resp.Patch, resp.Warnings)
				}
				return
			}
			ops := opsOf(t, resp)
			if len(ops) != 1 || ops[0].Op != "remove" || ops[0].Path != path {
				t.Errorf("patch %s, want one remove of %s", resp.Patch, path)
			}
			if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "container main: removed "+tc.name+": ") ||
				!strings.Contains(resp.Warnings[0], tc.why) {
				t.Errorf("warnings %v, want one naming %s and %q", resp.Warnings, tc.name, tc.why)
			}
		})
	}
}

// TestMutateRefusesATemplateSomeoneElseWrote: a template with the name the
// translation computes but another spec (made first by whoever can create
// templates in the namespace) is not used; the same spec is.
func TestMutateRefusesATemplateSomeoneElseWrote(t *testing.T) {
	p := kaiPod(map[string]string{"gpu-memory": "1024"})
	p.Namespace = "team"
	res, err := kai.Translate(p, kai.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := res.Template.Spec.Spec.DeepCopy()
	other.Devices.Requests[0].Exactly.Capacity.Requests["memory"] = resource.MustParse("100Gi")
	for spec, wantAllowed := range map[*resourceapi.ResourceClaimSpec]bool{&res.Template.Spec.Spec: true, other: false} {
		cluster := staticCluster{templates: map[string]*resourceapi.ResourceClaimSpec{res.Template.Name: spec}}
		srv := httptest.NewServer((&admission.Server{Cluster: cluster}).Handler())
		resp := review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, p)
		srv.Close()
		if resp.Allowed != wantAllowed {
			t.Errorf("existing template with the same spec %v: allowed %v (%v)", wantAllowed, resp.Allowed, resp.Result)
		}
		if !wantAllowed && (resp.Result.Code != 409 || !strings.Contains(resp.Result.Message, "exists with a spec other than")) {
			t.Errorf("refusal %+v", resp.Result)
		}
	}
}

func TestMutateLeavesOtherPodsAlone(t *testing.T) {
	srv := newServer(t)
	for _, p := range []*corev1.Pod{kaiPod(nil), kaiPod(map[string]string{"app": "web"})} {
		if resp := review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, p); !resp.Allowed || resp.Patch != nil {
			t.Errorf("pod without KAI annotations: %+v", resp)
		}
	}
}

func TestValidateRefusesBadConfigsWithPaths(t *testing.T) {
	srv := newServer(t)
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
	resp := review(t, srv, admission.PathValidate, "ResourceClaim", admissionv1.Create, claim)
	want := `invalid gpufrac.dev configuration: ResourceClaim/c: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi`
	if resp.Allowed || resp.Result.Message != want {
		t.Errorf("got %+v\nwant %s", resp.Result, want)
	}
	claim["spec"].(map[string]any)["devices"].(map[string]any)["config"].([]any)[0].(map[string]any)["opaque"].(map[string]any)["parameters"].(map[string]any)["memoryLimit"] = "60Gi"
	if resp := review(t, srv, admission.PathValidate, "ResourceClaim", admissionv1.Create, claim); !resp.Allowed {
		t.Errorf("valid claim refused: %+v", resp.Result)
	}
}
