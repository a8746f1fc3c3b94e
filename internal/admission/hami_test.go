// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/translate/hami"
)

type hamiCluster struct {
	staticCluster
	gpus []hami.GPU
}

func (c hamiCluster) HAMiGPUs() []hami.GPU { return c.gpus }

// TestMutateHAMiPodRemovesItsResources: the HAMi path patches the pod as
// the API server applies it: the claim added, every HAMi resource removed
// from requests and limits (cpu kept), the removal recorded, the
// scheduler name moved off hami-scheduler.
func TestMutateHAMiPodRemovesItsResources(t *testing.T) {
	s := &admission.Server{Cluster: hamiCluster{staticCluster{maxGPUs: 8}, []hami.GPU{{TotalMiB: 81559, Capacity: resource.MustParse("80384Mi")}}}}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"vllm","namespace":"team"},` +
		`"spec":{"schedulerName":"hami-scheduler","containers":[{"name":"main","image":"cuda",` +
		`"resources":{"limits":{"cpu":"1","nvidia.com/gpu":"1","nvidia.com/gpumem":"3000","nvidia.com/gpucores":"30"},` +
		`"requests":{"cpu":"1","nvidia.com/gpu":"1","nvidia.com/gpumem":"3000","nvidia.com/gpucores":"30"}}}]}}`)
	resp := reviewRaw(t, srv, admission.PathMutateHAMiPods, "Pod", admissionv1.Create, raw)
	patch, err := jsonpatch.DecodePatch(opsPatch(t, resp))
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
	for _, field := range []string{"limits", "requests"} {
		l, _ := lookup(got, "spec.containers.0.resources."+field).(map[string]any)
		if len(l) != 1 || l["cpu"] != "1" {
			t.Errorf("%s after the patch: %v", field, l)
		}
	}
	if lookup(got, "spec.containers.0.resources.claims") == nil || lookup(got, "spec.resourceClaims") == nil {
		t.Error("the container did not get its claim")
	}
	if s := lookup(got, "spec.schedulerName"); s != "default-scheduler" {
		t.Errorf("schedulerName %v", s)
	}
	if a, _ := lookup(got, "metadata.annotations").(map[string]any); !strings.Contains(a[hami.AnnotationResources].(string), `"nvidia.com/gpumem":"3k"`) {
		t.Errorf("removal not recorded: %v", a)
	}
	if w := strings.Join(resp.Warnings, "\n"); !strings.Contains(w, "gpucores 30") || !strings.Contains(w, "not enforced") {
		t.Errorf("warnings %v", resp.Warnings)
	}

	// HAMi's refusal comes back with its reason.
	bad := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"main","image":"cuda",` +
		`"resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem-percentage":"120"}}}]}}`)
	if resp := reviewRaw(t, srv, admission.PathMutateHAMiPods, "Pod", admissionv1.Create, bad); resp.Allowed ||
		!strings.Contains(resp.Result.Message, "must be an integer between 0 and 100") {
		t.Errorf("want HAMi's refusal, got %+v", resp)
	}
	// The KAI path never acts on HAMi resources: the opt-in is the path.
	plain := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"y"},"spec":{"containers":[{"name":"main","image":"cuda",` +
		`"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`)
	if resp := reviewRaw(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, plain); !resp.Allowed || resp.Patch != nil {
		t.Errorf("the KAI path changed a plain pod: %+v", resp)
	}
}

func opsPatch(t *testing.T, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	_ = opsOf(t, resp)
	return resp.Patch
}

// TestGPUKindsReadsWholeGPUs: distinct (memoryTotalMiB, capacity) kinds of
// gpu devices; a mig device and a device without memoryTotalMiB are left
// out, a device without type counts as a gpu.
func TestGPUKindsReadsWholeGPUs(t *testing.T) {
	dev := func(name, typ string, total int64, capacity string) resourceapi.Device {
		d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(capacity)}}}
		if typ != "" {
			d.Attributes["type"] = resourceapi.DeviceAttribute{StringValue: ptr.To(typ)}
		}
		if total > 0 {
			d.Attributes["memoryTotalMiB"] = resourceapi.DeviceAttribute{IntValue: ptr.To(total)}
		}
		return d
	}
	slices := []*resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpufrac.dev", Devices: []resourceapi.Device{
			dev("gpu-0", "gpu", 81559, "80384Mi"), dev("gpu-1", "", 81559, "80384Mi"), dev("gpu-2", "gpu", 81559, "81408Mi"),
			dev("mig-0", "mig", 9984, "9984Mi"), dev("old", "", 0, "40Gi"),
		}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec:       resourceapi.ResourceSliceSpec{Driver: "other.dev", Devices: []resourceapi.Device{dev("x", "gpu", 1000, "1000Mi")}},
	}}
	got := admission.GPUKinds(slices)
	if len(got) != 2 || got[0].Capacity.String() != "80384Mi" || got[1].Capacity.String() != "81408Mi" || got[0].TotalMiB != 81559 {
		t.Errorf("kinds %+v", got)
	}
}
