// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// gpufracDecision is what gpufrac's admission does with a pod: admit or
// refuse, and the container its claim goes to ("" when nothing translated).
func gpufracDecision(t *testing.T, p *corev1.Pod) (bool, string, error) {
	t.Helper()
	res, err := kai.Translate(p, kai.Options{GPUMemorySizes: sizes})
	if err != nil {
		return false, "", err
	}
	if res == nil {
		return true, "", nil
	}
	for _, list := range [][]corev1.Container{res.Pod.Spec.InitContainers, res.Pod.Spec.Containers} {
		for _, c := range list {
			if len(c.Resources.Claims) > 0 {
				return true, c.Name, nil
			}
		}
	}
	t.Fatalf("translated pod without a container claim")
	return false, "", nil
}

func podWith(annotations map[string]string, containers []string, gpuLimit bool) *corev1.Pod {
	p := pod(annotations, containers...)
	if gpuLimit {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	}
	return p
}

// TestKAIOwnCases ports KAI-Scheduler's own test cases (the facts; the code
// is ours) and checks both gpufrac and the independent model against them.
// Sources, in KAI-Scheduler: pkg/common/resources/gpu_sharing_validation_test.go
// (TestValidateGpuMemoryPortionLimitAnnotation,
// TestValidateGPUFractionRequest_ComputeSharingMode), gpu_sharing_nvfractions_test.go,
// pkg/admission/webhook/v1alpha2/nvfractions tests (binder-owned keys), and
// KAI's docs/gpu-sharing examples. KAI's unit tests call
// ValidateGPUFractionRequest alone; gpufrac transcribes KAI's whole admission
// (the mutating plugin runs first), so where that changes the outcome the
// case says so in fullPath.
func TestKAIOwnCases(t *testing.T) {
	pl := func(c string) string { return "kai.scheduler/container." + c + ".gpu-memory.portion.limit" }
	req := func(c string) string { return "nvidia.com/container." + c + ".gpu-memory.request" }
	mode := func(c string) string { return "nvidia.com/container." + c + ".gpu-compute.mode" }
	c0, c01 := []string{"container-0"}, []string{"container-0", "container-1"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		containers  []string
		gpuLimit    bool
		kaiAdmits   bool
		// fullPath: KAI's unit test checks validation alone; the full
		// admission (Mutate first) decides otherwise, for this reason.
		fullPath string
		target   string
	}{
		// TestValidateGpuMemoryPortionLimitAnnotation
		{name: "no portion limit annotation", annotations: map[string]string{}, containers: c0, kaiAdmits: true},
		{name: "portion limit without gpu-fraction", annotations: map[string]string{pl("container-0"): "0.8"}, containers: c0},
		{name: "valid portion limit greater than gpu-fraction", annotations: map[string]string{"gpu-fraction": "0.5", pl("container-0"): "0.8"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "portion limit smaller than gpu-fraction", annotations: map[string]string{"gpu-fraction": "0.5", pl("container-0"): "0.4"}, containers: c0},
		{name: "portion limit equal to gpu-fraction", annotations: map[string]string{"gpu-fraction": "0.5", pl("container-0"): "0.5"}, containers: c0},
		{name: "portion limit not smaller than 1", annotations: map[string]string{"gpu-fraction": "0.5", pl("container-0"): "1"}, containers: c0},
		{name: "portion limit with more than 5 decimal digits", annotations: map[string]string{"gpu-fraction": "0.5", pl("container-0"): "0.123456"}, containers: c0},
		{name: "portion limit with exactly 5 decimal digits", annotations: map[string]string{"gpu-fraction": "0.5", pl("container-0"): "0.81234"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "portion limit container name mismatches default fraction container", annotations: map[string]string{"gpu-fraction": "0.5", pl("other-container"): "0.8"}, containers: c0},
		{name: "portion limit container name mismatches gpu-fraction-container-name", annotations: map[string]string{"gpu-fraction": "0.5", "gpu-fraction-container-name": "container-1", pl("container-0"): "0.8"}, containers: c01},
		{name: "portion limit container name matches gpu-fraction-container-name", annotations: map[string]string{"gpu-fraction": "0.5", "gpu-fraction-container-name": "container-1", pl("container-1"): "0.8"}, containers: c01, kaiAdmits: true, target: "container-1"},
		// TestValidateGPUFractionRequest_ComputeSharingMode
		{name: "no compute sharing mode annotation", annotations: map[string]string{}, containers: c0, kaiAdmits: true},
		{name: "mode: container exists, matches NvFractions request container", annotations: map[string]string{req("container-0"): "1Gi", mode("container-0"): "sm-sharing"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "mode: container does not exist in pod spec", annotations: map[string]string{req("missing-container"): "1Gi", mode("missing-container"): "sm-sharing"}, containers: c0},
		{name: "mode: container name mismatches NvFractions request container", annotations: map[string]string{req("container-0"): "1Gi", mode("container-1"): "sm-sharing"}, containers: c01},
		{name: "mode: container name matches gpu-fraction-container-name", annotations: map[string]string{req("container-1"): "1Gi", mode("container-1"): "sm-sharing", "gpu-fraction-container-name": "container-1"}, containers: c01, kaiAdmits: true, target: "container-1"},
		{name: "mode: container name mismatches gpu-fraction-container-name", annotations: map[string]string{req("container-1"): "1Gi", mode("container-1"): "sm-sharing", "gpu-fraction-container-name": "container-0"}, containers: c01},
		{name: "mode: ignored when the pod only has a legacy portion request", annotations: map[string]string{"gpu-fraction": "0.5", mode("missing-container"): "sm-sharing"}, containers: c0, kaiAdmits: true,
			fullPath: "KAI's Mutate (GetFractionContainerRef) takes the NvFractions container as the target and finds no container missing-container"},
		{name: "mode: ignored when there is no accompanying fraction request at all", annotations: map[string]string{mode("missing-container"): "sm-sharing"}, containers: c0, kaiAdmits: true},
		// gpu_sharing_nvfractions_test.go / admission nvfractions tests
		{name: "binder-owned device list written by a user", annotations: map[string]string{req("container-0"): "1Gi", "nvidia.com/container.container-0.gpus.devices": "GPU-0"}, containers: c0},
		{name: "binder-owned compute portion written by a user", annotations: map[string]string{req("container-0"): "1Gi", "nvidia.com/container.container-0.gpu-compute.portion": "1"}, containers: c0},
		{name: "compute portion on a container other than the requesting one", annotations: map[string]string{req("container-0"): "1Gi", "nvidia.com/container.container-1.gpu-compute.portion": "0.5"}, containers: c01},
		{name: "a limit alone is the request", annotations: map[string]string{"nvidia.com/container.container-0.gpu-memory.limit": "2Gi"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "request above the limit", annotations: map[string]string{req("container-0"): "2Gi", "nvidia.com/container.container-0.gpu-memory.limit": "1Gi"}, containers: c0},
		{name: "compute request of a whole GPU", annotations: map[string]string{req("container-0"): "1Gi", "nvidia.com/container.container-0.gpu-compute.request": "1"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "compute request above one GPU", annotations: map[string]string{req("container-0"): "1Gi", "nvidia.com/container.container-0.gpu-compute.request": "1.5"}, containers: c0},
		// gpu_sharing_validation.go rules without a KAI unit test of their own
		{name: "num-devices with an NvFractions request (docs: request multiple fractional GPU devices)", annotations: map[string]string{req("container-0"): "1Gi", "gpu-fraction-num-devices": "2"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "num-devices alone", annotations: map[string]string{"gpu-fraction-num-devices": "2"}, containers: c0},
		{name: "gpu-memory equal to the NvFractions request", annotations: map[string]string{"gpu-memory": "1024", req("container-0"): "1Gi"}, containers: c0, kaiAdmits: true, target: "container-0"},
		{name: "NvFractions limit with gpu-fraction", annotations: map[string]string{"gpu-fraction": "0.5", "nvidia.com/container.container-0.gpu-memory.limit": "2Gi"}, containers: c0},
		{name: "fraction with a whole-GPU limit", annotations: map[string]string{"gpu-fraction": "0.5"}, containers: c0, gpuLimit: true},
		{name: "two containers with NvFractions requests", annotations: map[string]string{req("container-0"): "1Gi", req("container-1"): "1Gi"}, containers: c01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := podWith(tc.annotations, tc.containers, tc.gpuLimit)
			want := tc.kaiAdmits
			if tc.fullPath != "" {
				want = !want
			}
			got, target, err := gpufracDecision(t, p)
			if got != want || target != tc.target {
				t.Errorf("gpufrac: admitted %v (%v) into %q, KAI's admission: %v into %q", got, err, target, want, tc.target)
			}
			m := kaiModel{ann: tc.annotations, containers: tc.containers, gpuLimit: tc.gpuLimit}
			if mAdmit, mTarget := m.decide(); mAdmit != want || (want && mTarget != tc.target) {
				t.Errorf("model: admitted %v into %q, KAI: %v into %q", mAdmit, mTarget, want, tc.target)
			}
		})
	}
}

// TestGeneratedCrossCheck: for every combination of the annotation keys
// over a small value set, gpufrac's decision (and the container that gets
// the GPU) equals the independent model's.
func TestGeneratedCrossCheck(t *testing.T) {
	type choice struct{ key, value string }
	absent := choice{}
	dims := [][]choice{
		{absent, {"gpu-fraction", "0.5"}, {"gpu-fraction", "1.5"}, {"gpu-fraction", "0.75"}},
		{absent, {"gpu-memory", "1024"}, {"gpu-memory", "x"}},
		{absent, {"gpu-fraction-num-devices", "2"}, {"gpu-fraction-num-devices", "0"}},
		{absent, {"gpu-fraction-container-name", "main"}, {"gpu-fraction-container-name", "side"}},
		{absent, {"nvidia.com/container.main.gpu-memory.request", "1Gi"}, {"nvidia.com/container.main.gpu-memory.request", "2Gi"}},
		{absent, {"nvidia.com/container.main.gpu-memory.limit", "1Gi"}, {"nvidia.com/container.main.gpu-memory.limit", "512Mi"}},
		{absent, {"nvidia.com/container.side.gpu-memory.request", "1Gi"}},
		{absent, {"nvidia.com/container.main.gpu-compute.mode", "sm-sharing"}, {"nvidia.com/container.side.gpu-compute.mode", "time-slicing"}, {"nvidia.com/container.main.gpu-compute.mode", "mig"}},
		{absent, {"nvidia.com/container.main.gpu-compute.request", "0.5"}, {"nvidia.com/container.main.gpu-compute.request", "2"}},
		{absent, {"kai.scheduler/container.main.gpu-memory.portion.limit", "0.75"}, {"kai.scheduler/container.main.gpu-memory.portion.limit", "0.5"}, {"kai.scheduler/container.side.gpu-memory.portion.limit", "0.75"}},
	}
	containers := []string{"main", "side"}
	total, admitted := 0, 0
	var mismatches []string
	idx := make([]int, len(dims))
	for {
		a := map[string]string{}
		for d, i := range idx {
			if c := dims[d][i]; c.key != "" {
				a[c.key] = c.value
			}
		}
		for _, gpuLimit := range []bool{false, true} {
			total++
			mAdmit, mTarget := kaiModel{ann: a, containers: containers, gpuLimit: gpuLimit}.decide()
			gAdmit, gTarget, err := gpufracDecision(t, podWith(a, containers, gpuLimit))
			if mAdmit {
				admitted++
			}
			if mAdmit != gAdmit || (mAdmit && mTarget != gTarget) {
				mismatches = append(mismatches, fmt.Sprintf("%v gpuLimit=%v: model %v %q, gpufrac %v %q (%v)", render(a), gpuLimit, mAdmit, mTarget, gAdmit, gTarget, err))
			}
		}
		d := 0
		for ; d < len(dims); d++ {
			if idx[d]++; idx[d] < len(dims[d]) {
				break
			}
			idx[d] = 0
		}
		if d == len(dims) {
			break
		}
	}
	if len(mismatches) > 0 {
		t.Errorf("%d of %d pods decided differently, e.g.:\n%s", len(mismatches), total, strings.Join(mismatches[:min(10, len(mismatches))], "\n"))
	}
	if admitted == 0 || admitted == total {
		t.Errorf("the generated set must hold both admitted and refused pods: %d of %d admitted", admitted, total)
	}
	t.Logf("%d pods, %d admitted by KAI's rules", total, admitted)
}

func render(a map[string]string) string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k+"="+a[k])
	}
	sort.Strings(keys)
	return "{" + strings.Join(keys, ", ") + "}"
}
