// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hami

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The H100 80GB of gpufrac's simulated catalog: NVML's total 81559 MiB.
// On a node with MPS daemons (1024 MiB reserve) its slice offers
// 81559-1024 rounded down to 256Mi = 80384Mi; elsewhere 81408Mi.
var (
	h100Reserved = GPU{TotalMiB: 81559, Capacity: resource.MustParse("80384Mi")}
	h100         = GPU{TotalMiB: 81559, Capacity: resource.MustParse("81408Mi")}
	l4           = GPU{TotalMiB: 23034, Capacity: resource.MustParse("22784Mi")}
)

func hamiPod(limits map[corev1.ResourceName]string) *corev1.Pod {
	l := corev1.ResourceList{}
	for k, v := range limits {
		l[k] = resource.MustParse(v)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Image: "cuda", Resources: corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}},
			{Name: "sidecar", Image: "busybox"},
		}},
	}
}

// want is one translated container's claim: count, and per GPU kind the
// memory asked ("" for the whole capacity; absent kinds do not fit).
type want struct {
	count     int64
	exclusive bool
	asks      map[string]string // subrequest name -> memory ("whole" = no capacity)
	exact     string            // memory of an exact request (no GPU kinds known)
	warning   string
	refused   string
	untouched bool
}

// TestHAMiResourcesBecomeClaims pins, against HAMi's code (docs/hami.md),
// what each HAMi ask becomes: the defaults, the percentage of
// memoryTotalMiB (floor), gpucores 100 as a whole GPU, the refusals, and
// the removal of HAMi's resources.
func TestHAMiResourcesBecomeClaims(t *testing.T) {
	gpus := []GPU{l4, h100Reserved}
	cases := []struct {
		name   string
		limits map[corev1.ResourceName]string
		edit   func(*corev1.Pod)
		gpus   []GPU
		want   want
	}{
		{name: "plain count: memory 100%, gpucores defaulted to 100: the GPU alone",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"}, want: want{count: 1, exclusive: true}},
		{name: "gpumem in MiB on every kind that holds it",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "3000"},
			want:   want{count: 1, asks: map[string]string{"gpu-23034-22784": "3000Mi", "gpu-81559-80384": "3000Mi"}}},
		{name: "gpumem without a count: defaultGPUNum 1",
			limits: map[corev1.ResourceName]string{ResourceMemory: "30000"},
			want:   want{count: 1, asks: map[string]string{"gpu-81559-80384": "30000Mi"}}},
		{name: "percentage of memoryTotalMiB, floored",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemoryPercentage: "50"},
			want:   want{count: 1, asks: map[string]string{"gpu-23034-22784": "11517Mi", "gpu-81559-80384": "40779Mi"}}},
		{name: "99% exceeds the reserved capacity: the whole capacity",
			limits: map[corev1.ResourceName]string{ResourceCount: "2", ResourceMemoryPercentage: "99", ResourceCores: "10"},
			gpus:   []GPU{h100Reserved, h100},
			want:   want{count: 2, asks: map[string]string{"gpu-81559-80384": "whole", "gpu-81559-81408": "80743Mi"}, warning: "gpucores 10"}},
		{name: "gpumem wins over the percentage",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "2048", ResourceMemoryPercentage: "50"},
			want:   want{count: 1, asks: map[string]string{"gpu-23034-22784": "2Gi", "gpu-81559-80384": "2Gi"}}},
		{name: "percentage 100 without gpucores: the GPU alone",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemoryPercentage: "100"}, want: want{count: 1, exclusive: true}},
		{name: "percentage 0 is ignored: memory 100% (above each capacity: the whole capacity), gpucores stays 0 (a percentage was named)",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemoryPercentage: "0"},
			want:   want{count: 1, asks: map[string]string{"gpu-23034-22784": "whole", "gpu-81559-80384": "whole"}}},
		{name: "gpucores above 100 is clamped to 100: the GPU alone",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "1000", ResourceCores: "150"},
			want:   want{count: 1, exclusive: true, warning: "gpucores 100 with a memory ask"}},
		{name: "gpucores below 100: a warning, not enforced",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "1000", ResourceCores: "30"},
			want:   want{count: 1, asks: map[string]string{"gpu-23034-22784": "1000Mi", "gpu-81559-80384": "1000Mi"}, warning: "not enforced"}},
		{name: "no GPU kinds known: MiB of any GPU",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "1000"}, gpus: []GPU{},
			want: want{count: 1, exact: "1000Mi"}},
		{name: "percentage with no GPU kinds known",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemoryPercentage: "20"}, gpus: []GPU{},
			want: want{refused: "publishes no gpufrac GPU with memoryTotalMiB"}},
		{name: "percentage above 100: HAMi's validateMemoryPercentage",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemoryPercentage: "101"},
			want:   want{refused: "invalid nvidia.com/gpumem-percentage value 101 in container main: must be an integer between 0 and 100"}},
		{name: "gpumem above int32: GenerateResourceRequests rejects it",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "3000000000"},
			want:   want{refused: "not a plain integer within the int32 range"}},
		{name: "gpumem larger than every GPU",
			limits: map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "90000"},
			want:   want{refused: "no GPU the cluster publishes (23034 MiB, 81559 MiB) can hold this ask"}},
		{name: "privileged container: HAMi's webhook refuses",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"},
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			want: want{refused: "container sidecar is privileged"}},
		{name: "node assigned: HAMi's webhook refuses",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"},
			edit:   func(p *corev1.Pod) { p.Spec.NodeName = "n1" },
			want:   want{refused: "pod has node assigned"}},
		{name: "KAI annotations too: one language per pod",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"},
			edit:   func(p *corev1.Pod) { p.Annotations = map[string]string{"gpu-fraction": "0.5"} },
			want:   want{refused: "one request language per pod"}},
		{name: "HAMi's GPU type constraint is not translated",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"},
			edit:   func(p *corev1.Pod) { p.Annotations = map[string]string{"nvidia.com/use-gputype": "A100"} },
			want:   want{refused: "nvidia.com/use-gputype"}},
		{name: "another scheduler's pod: HAMi leaves it alone",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"},
			edit:   func(p *corev1.Pod) { p.Spec.SchedulerName = "volcano" },
			want:   want{untouched: true}},
		{name: "hami.io/webhook=ignore",
			limits: map[corev1.ResourceName]string{ResourceCount: "1"},
			edit:   func(p *corev1.Pod) { p.Labels = map[string]string{LabelWebhookIgnore: "ignore"} },
			want:   want{untouched: true}},
		{name: "a count of 0: nothing to allocate",
			limits: map[corev1.ResourceName]string{ResourceCount: "0"}, want: want{untouched: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := hamiPod(tc.limits)
			if tc.edit != nil {
				tc.edit(pod)
			}
			opts := Options{GPUs: gpus}
			if tc.gpus != nil {
				opts.GPUs = tc.gpus
			}
			res, err := Translate(pod, opts)
			switch {
			case tc.want.refused != "":
				if err == nil || !strings.Contains(err.Error(), tc.want.refused) {
					t.Fatalf("got %v, want a refusal containing %q", err, tc.want.refused)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.want.untouched:
				if res != nil {
					t.Fatalf("translated: %+v", res.Pod.Spec)
				}
				return
			case res == nil || len(res.Templates) != 1:
				t.Fatalf("want one template, got %+v", res)
			}
			checkClaim(t, res.Templates[0].Spec.Spec, tc.want)
			checkPod(t, pod, res)
			if tc.want.warning != "" && !strings.Contains(strings.Join(res.Warnings, "\n"), tc.want.warning) {
				t.Errorf("warnings %q lack %q", res.Warnings, tc.want.warning)
			}
			again, err := TemplatesFor(res.Pod, Options{})
			if err != nil || len(again) != 1 || !equality.Semantic.DeepEqual(again[0], res.Templates[0]) {
				t.Errorf("the controller's recomputation differs (%v):\n%+v\n%+v", err, again, res.Templates)
			}
		})
	}
}

func checkClaim(t *testing.T, spec resourceapi.ResourceClaimSpec, w want) {
	t.Helper()
	r := spec.Devices.Requests[0]
	switch {
	case w.exclusive || w.exact != "":
		if r.Exactly == nil || r.Exactly.Count != w.count {
			t.Fatalf("want an exact request of %d GPUs, got %+v", w.count, r)
		}
		if got := r.Exactly.Capacity; w.exclusive != (got == nil) {
			t.Errorf("capacity %+v: exclusive=%v", got, w.exclusive)
		} else if got != nil {
			if m := got.Requests["memory"]; m.String() != w.exact {
				t.Errorf("memory %s, want %s", m.String(), w.exact)
			}
		}
	default:
		got := map[string]string{}
		for _, sub := range r.FirstAvailable {
			if sub.Count != w.count {
				t.Errorf("%s: count %d, want %d", sub.Name, sub.Count, w.count)
			}
			got[sub.Name] = "whole"
			if sub.Capacity != nil {
				m := sub.Capacity.Requests["memory"]
				got[sub.Name] = m.String()
			}
		}
		if !equality.Semantic.DeepEqual(got, w.asks) {
			t.Errorf("asks %v, want %v", got, w.asks)
		}
	}
	if hasDistinct := len(spec.Devices.Constraints) == 1; hasDistinct != (w.count > 1) {
		t.Errorf("constraints %+v for %d GPUs", spec.Devices.Constraints, w.count)
	}
}

// checkPod: the claim is on the container, HAMi's resources are gone from
// its requests and limits and recorded, the sidecar is untouched.
func checkPod(t *testing.T, before *corev1.Pod, res *Result) {
	t.Helper()
	p := res.Pod
	main := p.Spec.Containers[0]
	if len(main.Resources.Claims) != 1 || len(p.Spec.ResourceClaims) != 1 || *p.Spec.ResourceClaims[0].ResourceClaimTemplateName != res.Templates[0].Name {
		t.Errorf("claims: pod %+v, container %+v", p.Spec.ResourceClaims, main.Resources.Claims)
	}
	for _, name := range Resources {
		if _, ok := main.Resources.Limits[name]; ok {
			t.Errorf("limit %s left", name)
		}
		if _, ok := main.Resources.Requests[name]; ok {
			t.Errorf("request %s left", name)
		}
	}
	var rec map[string]removed
	if err := json.Unmarshal([]byte(p.Annotations[AnnotationResources]), &rec); err != nil || !equality.Semantic.DeepEqual(rec["main"].Limits, before.Spec.Containers[0].Resources.Limits) {
		t.Errorf("recorded %v (%v), want %v", rec, err, before.Spec.Containers[0].Resources.Limits)
	}
	if p.Labels[LabelTranslated] != "true" || len(p.Spec.Containers[1].Resources.Claims) != 0 {
		t.Errorf("label or sidecar: %v %+v", p.Labels, p.Spec.Containers[1])
	}
}

// TestHAMiInitAndAppContainersGetAClaimEach: HAMi allocates for every
// container that asks; so does the translation, one claim each.
func TestHAMiInitAndAppContainersGetAClaimEach(t *testing.T) {
	pod := hamiPod(map[corev1.ResourceName]string{ResourceCount: "1", ResourceMemory: "2000"})
	pod.Spec.InitContainers = []corev1.Container{{Name: "warmup", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceCount: resource.MustParse("1")}}}}
	pod.Spec.SchedulerName = "hami-scheduler"
	res, err := Translate(pod, Options{GPUs: []GPU{h100}})
	if err != nil || len(res.Templates) != 2 || len(res.Pod.Spec.ResourceClaims) != 2 {
		t.Fatalf("%v %+v", err, res)
	}
	if res.Pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("schedulerName %q", res.Pod.Spec.SchedulerName)
	}
	if got := TemplateNames(res.Pod); len(got) != 2 {
		t.Errorf("TemplateNames %v", got)
	}
	if again, _ := Translate(res.Pod, Options{GPUs: []GPU{h100}}); again != nil {
		t.Errorf("a translated pod was translated again")
	}
	forged := res.Pod.DeepCopy()
	forged.Annotations[AnnotationResources] = `{"main":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"4000"}}}`
	if _, err := TemplatesFor(forged, Options{}); err == nil {
		t.Errorf("recorded resources that do not give the recorded names were accepted")
	}
	forged.Annotations[AnnotationInputs] = `{"gpus":[{"totalMiB":100,"capacity":"1Pi"}]}`
	if _, err := TemplatesFor(forged, Options{}); err == nil || !strings.Contains(err.Error(), "must be from 1Mi to the GPU's total") {
		t.Errorf("unbounded inputs: %v", err)
	}
}

// TestAllocatedFollowsTheRequestPolicy: min 1Gi, then the 256Mi step from it.
func TestAllocatedFollowsTheRequestPolicy(t *testing.T) {
	for in, want := range map[string]string{"100Mi": "1Gi", "3000Mi": "3Gi", "40779Mi": "40960Mi", "1Gi": "1Gi", "1025Mi": "1280Mi"} {
		got := Allocated(resource.MustParse(in), Options{})
		if got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s: %s, want %s", in, got.String(), want)
		}
	}
}
