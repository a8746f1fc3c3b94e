// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

var sizes = []resource.Quantity{resource.MustParse("141Gi"), resource.MustParse("81408Mi")}

func pod(annotations map[string]string, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", Annotations: annotations}}
	for _, c := range containers {
		if name, ok := strings.CutPrefix(c, "init:"); ok {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name})
			continue
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

// summary renders a template in one line per request alternative, so the
// tables below read like the design's annotation table.
func summary(t *testing.T, tmpl *resourceapi.ResourceClaimTemplate) string {
	t.Helper()
	spec := tmpl.Spec.Spec
	var parts []string
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			m := r.Exactly.Capacity.Requests["memory"]
			parts = append(parts, r.Name+": "+r.Exactly.DeviceClassName+" x"+itoa(r.Exactly.Count)+" memory "+m.String())
		}
		for _, s := range r.FirstAvailable {
			m := s.Capacity.Requests["memory"]
			parts = append(parts, r.Name+"/"+s.Name+": "+s.DeviceClassName+" x"+itoa(s.Count)+" memory "+m.String()+" where "+s.Selectors[0].CEL.Expression)
		}
	}
	for _, c := range spec.Devices.Constraints {
		parts = append(parts, "distinct "+string(*c.DistinctAttribute))
	}
	for _, c := range spec.Devices.Config {
		var fc map[string]any
		_ = json.Unmarshal(c.Opaque.Parameters.Raw, &fc)
		part := "config " + strings.Join(c.Requests, ",")
		if l, ok := fc["memoryLimit"].(string); ok {
			part += " memoryLimit " + l
		}
		if m, ok := fc["computeMode"].(string); ok {
			part += fmt.Sprintf(" %s %v%%", m, fc["activeThreadPercentage"])
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestTranslate(t *testing.T) {
	const sel81, sel141 = `device.capacity["gpufrac.dev"].memory.compareTo(quantity("81408Mi")) == 0`, `device.capacity["gpufrac.dev"].memory.compareTo(quantity("141Gi")) == 0`
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		container string
		want      string
	}{{
		name:      "gpu-fraction: KAI's binder floors the portion of each GPU size; the claim asks that rounded up to the step",
		pod:       pod(map[string]string{"gpu-fraction": "0.3"}, "main", "sidecar"),
		container: "main",
		want:      "gpu/size-81408mi: gpufrac.dev x1 memory 24Gi where " + sel81 + "; gpu/size-141gi: gpufrac.dev x1 memory 43520Mi where " + sel141,
	}, {
		name:      "gpu-memory in MiB",
		pod:       pod(map[string]string{"gpu-memory": "20000"}, "main"),
		container: "main",
		want:      "gpu: gpufrac.dev x1 memory 20000Mi",
	}, {
		name:      "num-devices lands on distinct GPUs, with an NvFractions request too (KAI docs' example)",
		pod:       pod(map[string]string{"nvidia.com/container.main.gpu-memory.request": "40Gi", "gpu-fraction-num-devices": "2"}, "main"),
		container: "main",
		want:      "gpu: gpufrac.dev x2 memory 40Gi; distinct gpufrac.dev/uuid",
	}, {
		name:      "gpu-fraction-container-name picks the container",
		pod:       pod(map[string]string{"gpu-memory": "1024", "gpu-fraction-container-name": "worker"}, "main", "worker"),
		container: "worker",
		want:      "gpu: gpufrac.dev x1 memory 1Gi",
	}, {
		name:      "gpu-fraction-container-name with NvFractions on that container",
		pod:       pod(map[string]string{"nvidia.com/container.worker.gpu-memory.request": "2Gi", "gpu-fraction-container-name": "worker"}, "main", "worker"),
		container: "worker",
		want:      "gpu: gpufrac.dev x1 memory 2Gi",
	}, {
		name:      "sm-sharing without a compute request: the SM cap is the memory's share of each GPU size, rounded up to hundredths, as KAI's scheduler hands it to the binder",
		pod:       pod(map[string]string{"gpu-memory": "20480", "kai.scheduler/gpu-compute-sharing-mode": "sm-sharing"}, "main"),
		container: "main",
		want: "gpu/size-81408mi: sm-sharing.gpufrac.dev x1 memory 20Gi where " + sel81 + "; gpu/size-141gi: sm-sharing.gpufrac.dev x1 memory 20Gi where " + sel141 +
			"; config gpu/size-81408mi SMSharing 26%; config gpu/size-141gi SMSharing 15%",
	}, {
		name: "NvFractions request, limit, sm-sharing and a compute request: the SM cap of the MPS namespace",
		pod: pod(map[string]string{
			"nvidia.com/container.main.gpu-memory.request":  "20Gi",
			"nvidia.com/container.main.gpu-memory.limit":    "30Gi",
			"nvidia.com/container.main.gpu-compute.mode":    "sm-sharing",
			"nvidia.com/container.main.gpu-compute.request": "0.25",
		}, "main"),
		container: "main",
		want:      "gpu: sm-sharing.gpufrac.dev x1 memory 20Gi; config gpu memoryLimit 30Gi SMSharing 25%",
	}, {
		name:      "a limit alone is also the request, on an init container",
		pod:       pod(map[string]string{"nvidia.com/container.warmup.gpu-memory.limit": "4Gi"}, "init:warmup", "main"),
		container: "warmup",
		want:      "gpu: gpufrac.dev x1 memory 4Gi; config gpu memoryLimit 4Gi",
	}, {
		name:      "gpu-compute.mode beside gpu-fraction (KAI's own scheduler tests use it)",
		pod:       pod(map[string]string{"gpu-fraction": "0.5", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}, "main"),
		container: "main",
		want: "gpu/size-81408mi: sm-sharing.gpufrac.dev x1 memory 40704Mi where " + sel81 + "; gpu/size-141gi: sm-sharing.gpufrac.dev x1 memory 72192Mi where " + sel141 +
			"; config gpu/size-81408mi SMSharing 50%; config gpu/size-141gi SMSharing 50%",
	}, {
		name: "portion limit with gpu-fraction: a limit per GPU size, floored over the usable memory",
		pod: pod(map[string]string{
			"gpu-fraction": "0.5",
			"kai.scheduler/container.main.gpu-memory.portion.limit": "0.75",
		}, "main"),
		container: "main",
		want: "gpu/size-81408mi: gpufrac.dev x1 memory 40704Mi where " + sel81 + "; gpu/size-141gi: gpufrac.dev x1 memory 72192Mi where " + sel141 +
			"; config gpu/size-81408mi memoryLimit 61056Mi; config gpu/size-141gi memoryLimit 108288Mi",
	}, {
		name:      "gpu-memory beside a different NvFractions request: KAI's mutation rewrites the request, gpu-memory wins",
		pod:       pod(map[string]string{"gpu-memory": "1024", "nvidia.com/container.main.gpu-memory.request": "2Gi"}, "main"),
		container: "main",
		want:      "gpu: gpufrac.dev x1 memory 1Gi",
	}, {
		name:      "gpu-fraction beside an NvFractions request: the NvFractions request wins, on one claim",
		pod:       pod(map[string]string{"gpu-fraction": "0.5", "nvidia.com/container.side.gpu-memory.request": "10Gi"}, "main", "side"),
		container: "side",
		want:      "gpu: gpufrac.dev x1 memory 10Gi",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := kai.Translate(tc.pod, kai.Options{GPUMemorySizes: sizes})
			if err != nil {
				t.Fatal(err)
			}
			tmpl := res.Template
			if tmpl.Namespace != "team" || tmpl.Labels[translated.LabelManagedBy] != translated.ManagedByValue || !strings.HasPrefix(tmpl.Name, "gpufrac-kai-") {
				t.Errorf("template meta %+v", tmpl.ObjectMeta)
			}
			if got := templateOf(t, res, tc.container); got != tmpl {
				t.Fatalf("container %s does not use the template", tc.container)
			}
			if s := summary(t, tmpl); s != tc.want {
				t.Errorf("\n got: %s\nwant: %s", s, tc.want)
			}
			if res.Pod.Annotations[kai.AnnotationTranslated] != tmpl.Name || res.Pod.Labels[kai.LabelTranslated] != "true" {
				t.Error("the translated pod is not marked")
			}
			if tc.pod.Spec.ResourceClaims != nil {
				t.Error("the input pod was modified")
			}
			// A second translation of the result is a no-op.
			if again, err := kai.Translate(res.Pod, kai.Options{GPUMemorySizes: sizes}); again != nil || err != nil {
				t.Errorf("translating twice: %v %v", again, err)
			}
			// The controller recomputes the same template from the pod alone,
			// whatever GPUs the cluster has by then.
			again, err := kai.TemplateFor(res.Pod, kai.Options{GPUMemorySizes: []resource.Quantity{resource.MustParse("1Gi")}})
			if err != nil || again.Name != tmpl.Name || summary(t, again) != tc.want {
				t.Errorf("TemplateFor: %v %v", again, err)
			}
		})
	}
}

func TestTranslateMovesThePodOffKAI(t *testing.T) {
	p := pod(map[string]string{"gpu-memory": "1024"}, "main", "side")
	p.Spec.SchedulerName = "kai-scheduler"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "NVIDIA_GPU_MEMORY_LIMIT", Value: "999999"}, {Name: "NVIDIA_GPU_MEMORY_REQUEST", Value: "1"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "NVIDIA_GPU_MEMORY_LIMIT", Value: "5"}}
	res, err := kai.Translate(p, kai.Options{GPUMemorySizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("schedulerName %q", res.Pod.Spec.SchedulerName)
	}
	if env := res.Pod.Spec.Containers[0].Env; len(env) != 1 || env[0].Name != "A" {
		t.Errorf("claim container env %v, want only A", env)
	}
	if env := res.Pod.Spec.Containers[1].Env; len(env) != 1 {
		t.Errorf("a container without the claim lost its env: %v", env)
	}
	want := []string{
		"container main: removed NVIDIA_GPU_MEMORY_LIMIT: the GPU memory of a gpufrac claim is set by the driver, not by the pod",
		"container main: removed NVIDIA_GPU_MEMORY_REQUEST: the GPU memory of a gpufrac claim is set by the driver, not by the pod",
		"container main: removed NVIDIA_VISIBLE_DEVICES: the GPUs and driver capabilities of a gpufrac claim come from its CDI spec, not from the pod: a node's NVIDIA runtime that honours this variable would give the container GPUs its claim does not hold",
		"schedulerName kai-scheduler replaced by default-scheduler: gpufrac's claim is placed by the Kubernetes scheduler, and KAI must not act on the pod too",
	}
	if strings.Join(res.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(res.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

func TestRoundingAndComputeNotesOnTheTemplate(t *testing.T) {
	res, err := kai.Translate(pod(map[string]string{"gpu-fraction": "0.3", "nvidia.com/container.main.gpu-compute.request": "0.4"}, "main"), kai.Options{GPUMemorySizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	want := "gpu/size-81408mi: KAI 24422Mi, the API server allocates 24Gi (min 1Gi, step 256Mi); gpu/size-141gi: KAI 43315Mi, the API server allocates 43520Mi (min 1Gi, step 256Mi)"
	if got := res.Template.Annotations[kai.AnnotationRounding]; got != want {
		t.Errorf("rounding note\n got: %s\nwant: %s", got, want)
	}
	if res.Template.Annotations[kai.AnnotationComputeCap] == "" || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "not enforced") {
		t.Errorf("a time-slicing compute request must be reported as not enforced: %v %v", res.Template.Annotations, res.Warnings)
	}
}

func TestSameParametersShareATemplate(t *testing.T) {
	a, _ := kai.Translate(pod(map[string]string{"gpu-memory": "20000"}, "x"), kai.Options{})
	b, _ := kai.Translate(pod(map[string]string{"gpu-memory": "20000"}, "y"), kai.Options{})
	c, _ := kai.Translate(pod(map[string]string{"gpu-memory": "20001"}, "x"), kai.Options{})
	if a.Template.Name != b.Template.Name {
		t.Error("equal parameters gave different template names")
	}
	if a.Template.Name == c.Template.Name {
		t.Error("different parameters gave the same template name")
	}
}

func TestNothingToTranslate(t *testing.T) {
	translated := pod(map[string]string{"gpu-memory": "1024", kai.AnnotationTranslated: "gpufrac-kai-abc"}, "main")
	translated.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpufrac-main", ResourceClaimTemplateName: ptrTo("gpufrac-kai-abc")}}
	for name, p := range map[string]*corev1.Pod{
		"no annotations":     pod(nil, "main"),
		"unrelated":          pod(map[string]string{"prometheus.io/scrape": "true"}, "main"),
		"translated already": translated,
		// KAI: "ignored when there is no accompanying fraction request at all".
		"a compute mode alone": pod(map[string]string{"nvidia.com/container.missing.gpu-compute.mode": "sm-sharing"}, "main"),
	} {
		res, err := kai.Translate(p, kai.Options{GPUMemorySizes: sizes})
		if res != nil || err != nil {
			t.Errorf("%s: %v %v", name, res, err)
		}
	}
	// A pod that only says it was translated is translated.
	fake := pod(map[string]string{"gpu-memory": "1024", kai.AnnotationTranslated: "gpufrac-kai-abc"}, "main")
	if res, err := kai.Translate(fake, kai.Options{}); err != nil || res == nil {
		t.Errorf("a self-declared translation was skipped: %v %v", res, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestRefusals(t *testing.T) {
	const prefix = "cannot translate KAI GPU-sharing annotations: "
	type tc struct {
		name        string
		annotations map[string]string
		containers  []string
		sizes       []resource.Quantity
		want        string
	}
	main := []string{"main"}
	for _, tc := range []tc{
		{"fraction above 1", map[string]string{"gpu-fraction": "1.5"}, main, sizes,
			`annotation gpu-fraction="1.5": gpu-fraction annotation value must be a positive number smaller than 1.0`},
		{"memory not a number", map[string]string{"gpu-memory": "20Gi"}, main, sizes,
			`annotation gpu-memory="20Gi": failed to parse gpu memory annotation value: must be a whole number of MiB`},
		{"both fraction and memory", map[string]string{"gpu-memory": "1024", "gpu-fraction": "0.5"}, main, sizes,
			`annotation gpu-memory="1024": cannot request both gpu-fraction and GPU memory request`},
		{"num-devices alone", map[string]string{"gpu-fraction-num-devices": "2"}, main, sizes,
			`annotation gpu-fraction-num-devices="2": cannot request multiple fractional devices without specifying fraction details (portion or memory)`},
		{"num-devices zero", map[string]string{"gpu-memory": "1024", "gpu-fraction-num-devices": "0"}, main, sizes,
			`annotation gpu-fraction-num-devices="0": fraction count annotation value must be a positive integer greater than 0`},
		{"no such container", map[string]string{"gpu-memory": "1024", "gpu-fraction-container-name": "nope"}, main, sizes,
			`annotation gpu-fraction-container-name="nope": container with name nope not found for fraction request`},
		{"NvFractions: no such container", map[string]string{"nvidia.com/container.nope.gpu-memory.request": "1Gi"}, main, sizes,
			`annotation nvidia.com/container.nope.gpu-memory.request="1Gi": container with name nope not found for fraction request`},
		{"limit below request", map[string]string{"nvidia.com/container.main.gpu-memory.request": "20Gi", "nvidia.com/container.main.gpu-memory.limit": "10Gi"}, main, sizes,
			`annotation nvidia.com/container.main.gpu-memory.limit="10Gi": invalid fraction request for container main: request is greater than limit`},
		{"bad quantity", map[string]string{"nvidia.com/container.main.gpu-memory.request": "lots"}, main, sizes,
			`annotation nvidia.com/container.main.gpu-memory.request="lots": annotation value must be a valid Kubernetes memory quantity greater than 0`},
		{"unknown compute mode", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1Gi", "nvidia.com/container.main.gpu-compute.mode": "mig"}, main, sizes,
			`annotation nvidia.com/container.main.gpu-compute.mode="mig": invalid NvFractions compute mode (want time-slicing or sm-sharing)`},
		{"compute request above 1", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1Gi", "nvidia.com/container.main.gpu-compute.request": "50"}, main, sizes,
			`annotation nvidia.com/container.main.gpu-compute.request="50": annotation value must be a positive number no greater than 1.0`},
		{"two fractional containers", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1Gi", "nvidia.com/container.side.gpu-memory.request": "1Gi"}, []string{"main", "side"}, sizes,
			`annotation nvidia.com/container.side.gpu-memory.request="1Gi": currently, kai doesn't support multiple containers with fractional GPU requests`},
		{"a lookalike key", map[string]string{"nvidia.com/container.main.gpu-memory.portion.limit": "0.5"}, main, sizes,
			`annotation nvidia.com/container.main.gpu-memory.portion.limit="0.5": invalid NvFractions annotation key (want nvidia.com/container.<container>.gpu-memory.request, .gpu-memory.limit, .gpu-compute.mode or .gpu-compute.request)`},
		{"portion limit without gpu-fraction", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1Gi", "kai.scheduler/container.main.gpu-memory.portion.limit": "0.5"}, main, sizes,
			`annotation kai.scheduler/container.main.gpu-memory.portion.limit="0.5": can only be used together with the gpu-fraction annotation`},
		{"portion limit not above gpu-fraction", map[string]string{"gpu-fraction": "0.5", "kai.scheduler/container.main.gpu-memory.portion.limit": "0.5"}, main, sizes,
			`annotation kai.scheduler/container.main.gpu-memory.portion.limit="0.5": value (0.5) must be greater than gpu-fraction annotation value (0.5)`},
		{"binder-owned devices set by a user", map[string]string{"nvidia.com/container.main.gpus.devices": "GPU-1"}, main, sizes,
			`annotation nvidia.com/container.main.gpus.devices="GPU-1": .gpus.devices annotations may only be modified by KAI's binder service account, which writes them at bind time`},
		{"binder-owned compute portion set by a user", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1Gi", "nvidia.com/container.main.gpu-compute.portion": "1"}, main, sizes,
			`annotation nvidia.com/container.main.gpu-compute.portion="1": .gpu-compute.portion annotations may only be modified by KAI's binder service account, which writes them at bind time`},
		// gpufrac's bounds: KAI accepts these, no GPU can satisfy them.
		{"fraction with no gpufrac GPUs", map[string]string{"gpu-fraction": "0.5"}, main, nil,
			`annotation gpu-fraction="0.5": gpufrac: the cluster has no gpufrac GPUs, so a portion cannot be turned into memory`},
		{"memory above the largest GPU", map[string]string{"gpu-memory": "200000"}, main, sizes,
			`annotation gpu-memory="200000": gpufrac: 200000Mi must be at most 141Gi, the largest GPU the cluster publishes`},
		{"memory that overflows bytes", map[string]string{"gpu-memory": "9223372036854775807"}, main, sizes,
			`annotation gpu-memory="9223372036854775807": gpufrac: must be at most 8796093022207 MiB (more overflows a count of bytes); no GPU comes near it`},
		{"unknown pod-wide mode", map[string]string{"gpu-memory": "1024", "kai.scheduler/gpu-compute-sharing-mode": "exclusive"}, main, sizes,
			`annotation kai.scheduler/gpu-compute-sharing-mode="exclusive": gpufrac: must be time-slicing or sm-sharing (KAI's code does not read this key; gpufrac reads it as the default compute mode)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := kai.Translate(pod(tc.annotations, tc.containers...), kai.Options{GPUMemorySizes: tc.sizes})
			if err == nil {
				t.Fatalf("translated: %+v", res)
			}
			if err.Error() != prefix+tc.want {
				t.Errorf("\n got: %s\nwant: %s", err.Error(), prefix+tc.want)
			}
		})
	}
	res, err := kai.Translate(pod(map[string]string{"gpu-memory": "1024", "gpu-fraction-num-devices": "9"}, "main"), kai.Options{GPUMemorySizes: sizes, MaxGPUsPerNode: 8})
	if err == nil || err.Error() != prefix+`annotation gpu-fraction-num-devices="9": gpufrac: must be at most 8, the most gpufrac GPUs one node in the cluster publishes` {
		t.Errorf("a device count above any node's: %v %v", res, err)
	}
}

// TestBinderArithmetic ports the figures of KAI's binder tests
// (pkg/binder/plugins/nvfractions: "2000MiB * 0.5 with no reserve" gives
// 1000Mi, a 0.8 portion limit 1600Mi, a reserve that swallows the GPU fails)
// and adds the reserve and the derived compute portion. The claim asks
// KAI's figure rounded up to the 256Mi step; the rounding note keeps KAI's.
func TestBinderArithmetic(t *testing.T) {
	gpu2000 := []resource.Quantity{resource.MustParse("2000Mi")}
	const sel = `device.capacity["gpufrac.dev"].memory.compareTo(quantity("2000Mi")) == 0`
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		reserved    int64
		want        string
	}{
		{"2000MiB x 0.5, no reserve", map[string]string{"gpu-fraction": "0.5"}, 0,
			"gpu/size-2000mi: gpufrac.dev x1 memory 1Gi where " + sel + "; rounding gpu/size-2000mi: KAI 1000Mi, the API server allocates 1Gi (min 1Gi, step 256Mi)"},
		{"portion limit 0.8", map[string]string{"gpu-fraction": "0.5", "kai.scheduler/container.main.gpu-memory.portion.limit": "0.8"}, 0,
			"gpu/size-2000mi: gpufrac.dev x1 memory 1Gi where " + sel + "; config gpu/size-2000mi memoryLimit 1600Mi; rounding gpu/size-2000mi: KAI 1000Mi, the API server allocates 1Gi (min 1Gi, step 256Mi)"},
		{"a 500 MiB reserve: floor((2000 - 500) x 0.3)", map[string]string{"gpu-fraction": "0.3"}, 500,
			"gpu/size-2000mi: gpufrac.dev x1 memory 512Mi where " + sel + "; rounding gpu/size-2000mi: KAI 450Mi, the API server allocates 1Gi (min 1Gi, step 256Mi)"},
		{"sm-sharing: the compute portion is the scheduler's portion of the GPU's total (600/2000), which the binder receives and uses before memory / usable memory (600/1500)", map[string]string{"gpu-memory": "600", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}, 500,
			"gpu/size-2000mi: sm-sharing.gpufrac.dev x1 memory 600Mi where " + sel + "; config gpu/size-2000mi SMSharing 30%; rounding gpu/size-2000mi: KAI 600Mi, the API server allocates 1Gi (min 1Gi, step 256Mi)"},
		{"sm-sharing: a compute request wins, rounded to the nearest percent", map[string]string{"gpu-memory": "600", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing", "nvidia.com/container.main.gpu-compute.request": "0.336"}, 0,
			"gpu: sm-sharing.gpufrac.dev x1 memory 600Mi; config gpu SMSharing 34%; rounding gpu: KAI 600Mi, the API server allocates 1Gi (min 1Gi, step 256Mi)"},
		{"sm-sharing: a tiny compute request is 1%, never 0 (unlimited to MPS)", map[string]string{"gpu-memory": "600", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing", "nvidia.com/container.main.gpu-compute.request": "0.0049"}, 0,
			"gpu: sm-sharing.gpufrac.dev x1 memory 600Mi; config gpu SMSharing 1%; rounding gpu: KAI 600Mi, the API server allocates 1Gi (min 1Gi, step 256Mi)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := kai.Translate(pod(tc.annotations, "main"), kai.Options{GPUMemorySizes: gpu2000, ReservedMiB: tc.reserved})
			if err != nil {
				t.Fatal(err)
			}
			got := summary(t, res.Template)
			if note := res.Template.Annotations[kai.AnnotationRounding]; note != "" {
				got += "; rounding " + note
			}
			if got != tc.want {
				t.Errorf("\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
	_, err := kai.Translate(pod(map[string]string{"gpu-fraction": "0.5"}, "main"), kai.Options{GPUMemorySizes: gpu2000, ReservedMiB: 2000})
	if err == nil || !strings.Contains(err.Error(), "gpufrac: KAI's reserve of 2000 MiB (--kai-reserved-gpu-memory-mib) leaves nothing of a 2000 MiB GPU") {
		t.Errorf("a reserve that swallows the GPU: %v", err)
	}
}

// TestHostileRecordedInputs: the inputs a translated pod records are
// written by whoever creates the pod (a pod may skip the webhook), so the
// controller's TemplateFor holds them to what the webhook could record,
// and a per-size request over more sizes than a claim can name is refused.
func TestHostileRecordedInputs(t *testing.T) {
	nine := make([]resource.Quantity, 9)
	for i := range nine {
		nine[i] = *resource.NewQuantity(int64(i+1)<<30, resource.BinarySI)
	}
	if _, err := kai.Translate(pod(map[string]string{"gpu-fraction": "0.5"}, "main"), kai.Options{GPUMemorySizes: nine}); err == nil ||
		!strings.Contains(err.Error(), "the cluster publishes 9 sizes, and a claim can name at most 8 alternatives") {
		t.Errorf("nine GPU sizes: %v", err)
	}
	res, err := kai.Translate(pod(map[string]string{"gpu-fraction": "0.5"}, "main"), kai.Options{GPUMemorySizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	for inputs, want := range map[string]string{
		`{"gpuMemorySizes":["1e30"],"memoryStep":"256Mi"}`:                                                `gpuMemorySizes[0]: 1e30: must be from 1Mi to 1Pi`,
		`{"gpuMemorySizes":["-80Gi"],"memoryStep":"256Mi"}`:                                               `gpuMemorySizes[0]: -80Gi: must be from 1Mi to 1Pi`,
		`{"gpuMemorySizes":["80Gi"],"reservedMiB":-9223372036854775808,"memoryStep":"256Mi"}`:             `reservedMiB: -9223372036854775808: must be from 0 to 1073741824 MiB (1Pi)`,
		`{"gpuMemorySizes":["80Gi"],"reservedMiB":9223372036854775807,"memoryStep":"256Mi"}`:              `reservedMiB: 9223372036854775807: must be from 0 to 1073741824 MiB (1Pi)`,
		`{"gpuMemorySizes":["1E-999999999"],"memoryStep":"256Mi"}`:                                        `gpuMemorySizes[0]: "1E-999999999": exponent -999999999 is outside [-30, 30]`,
		`{"gpuMemorySizes":["80Gi"],"memoryStep":"1e999999999"}`:                                          `memoryStep: "1e999999999": exponent 999999999 is outside [-30, 30]`,
		`{"gpuMemorySizes":["80Gi"],"memoryStep":"-1"}`:                                                   `memoryStep: -1: must be from 1 byte to 1Gi`,
		`{"gpuMemorySizes":["1Gi","2Gi","3Gi","4Gi","5Gi","6Gi","7Gi","8Gi","9Gi"],"memoryStep":"256Mi"}`: `gpuMemorySizes: 9 sizes, at most 8`,
		`{"gpuMemorySizes":["80Gi"],"gpuMemoryTotalsMiB":[81920,81920],"memoryStep":"256Mi"}`:             `gpuMemoryTotalsMiB: 2 totals for 1 sizes: want one per size`,
		`{"gpuMemorySizes":["80Gi"],"gpuMemoryTotalsMiB":[1024],"memoryStep":"256Mi"}`:                    `gpuMemoryTotalsMiB[0]: 1024: must be from the size 80Gi to 1073741824 MiB (1Pi)`,
		`{"gpuMemorySizes":["80Gi"],"gpuMemoryTotalsMiB":[9223372036854775807],"memoryStep":"256Mi"}`:     `gpuMemoryTotalsMiB[0]: 9223372036854775807: must be from the size 80Gi`,
	} {
		p := res.Pod.DeepCopy()
		p.Annotations[kai.AnnotationInputs] = inputs
		if _, err := kai.TemplateFor(p, kai.Options{}); err == nil || !strings.Contains(err.Error(), "annotation gpufrac.dev/kai-inputs: "+want) {
			t.Errorf("%s: %v, want %q", inputs, err, want)
		}
	}
}
