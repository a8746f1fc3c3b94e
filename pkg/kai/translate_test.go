package kai_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/pkg/kai"
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
		parts = append(parts, "config "+strings.Join(c.Requests, ",")+" memoryLimit "+fc["memoryLimit"].(string))
	}
	return strings.Join(parts, "; ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestTranslate(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		// container → template summary
		want map[string]string
	}{{
		name: "gpu-fraction: a portion of whatever GPU size it lands on",
		pod:  pod(map[string]string{"gpu-fraction": "0.5"}, "main", "sidecar"),
		want: map[string]string{"main": `gpu/size-81408mi: gpufrac.dev x1 memory 40704Mi where device.capacity["gpufrac.dev"].memory.compareTo(quantity("81408Mi")) == 0; ` +
			`gpu/size-141gi: gpufrac.dev x1 memory 72192Mi where device.capacity["gpufrac.dev"].memory.compareTo(quantity("141Gi")) == 0`},
	}, {
		name: "gpu-memory in MiB",
		pod:  pod(map[string]string{"gpu-memory": "20000"}, "main"),
		want: map[string]string{"main": "gpu: gpufrac.dev x1 memory 20000Mi"},
	}, {
		name: "num-devices lands on distinct GPUs",
		pod:  pod(map[string]string{"gpu-memory": "40960", "gpu-fraction-num-devices": "2"}, "main"),
		want: map[string]string{"main": "gpu: gpufrac.dev x2 memory 40Gi; distinct gpufrac.dev/uuid"},
	}, {
		name: "gpu-fraction-container-name picks the container",
		pod:  pod(map[string]string{"gpu-memory": "1024", "gpu-fraction-container-name": "worker"}, "main", "worker"),
		want: map[string]string{"worker": "gpu: gpufrac.dev x1 memory 1Gi"},
	}, {
		name: "pod-wide sharing mode sm-sharing",
		pod:  pod(map[string]string{"gpu-memory": "1024", "kai.scheduler/gpu-compute-sharing-mode": "sm-sharing"}, "main"),
		want: map[string]string{"main": "gpu: sm-sharing.gpufrac.dev x1 memory 1Gi"},
	}, {
		name: "per-container request, limit and mode, init containers too",
		pod: pod(map[string]string{
			"nvidia.com/container.main.gpu-memory.request": "20Gi",
			"nvidia.com/container.main.gpu-memory.limit":   "30Gi",
			"nvidia.com/container.main.gpu-compute.mode":   "sm-sharing",
			"nvidia.com/container.warmup.gpu-memory.limit": "4Gi",
			"nvidia.com/container.main.gpus.devices":       "GPU-written-by-the-binder",
		}, "init:warmup", "main"),
		want: map[string]string{
			"main":   "gpu: sm-sharing.gpufrac.dev x1 memory 20Gi; config gpu memoryLimit 30Gi",
			"warmup": "gpu: gpufrac.dev x1 memory 4Gi; config gpu memoryLimit 4Gi",
		},
	}, {
		name: "portion limit: a limit per GPU size",
		pod: pod(map[string]string{
			"nvidia.com/container.main.gpu-memory.request":          "16Gi",
			"kai.scheduler/container.main.gpu-memory.portion.limit": "0.25",
		}, "main"),
		want: map[string]string{"main": `gpu/size-81408mi: gpufrac.dev x1 memory 16Gi where device.capacity["gpufrac.dev"].memory.compareTo(quantity("81408Mi")) == 0; ` +
			`gpu/size-141gi: gpufrac.dev x1 memory 16Gi where device.capacity["gpufrac.dev"].memory.compareTo(quantity("141Gi")) == 0; ` +
			`config gpu/size-81408mi memoryLimit 20352Mi; config gpu/size-141gi memoryLimit 36096Mi`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := kai.Translate(tc.pod, kai.Options{GPUMemorySizes: sizes})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Templates) != len(tc.want) {
				t.Fatalf("%d templates, want %d", len(res.Templates), len(tc.want))
			}
			byName := map[string]*resourceapi.ResourceClaimTemplate{}
			for _, tmpl := range res.Templates {
				byName[tmpl.Name] = tmpl
				if tmpl.Namespace != "team" || tmpl.Labels[kai.LabelManagedBy] != kai.ManagedByValue || !strings.HasPrefix(tmpl.Name, "gpufrac-kai-") {
					t.Errorf("template meta %+v", tmpl.ObjectMeta)
				}
			}
			claims := map[string]string{}
			for _, c := range res.Pod.Spec.ResourceClaims {
				claims[c.Name] = *c.ResourceClaimTemplateName
			}
			for container, want := range tc.want {
				var got *corev1.Container
				for _, list := range [][]corev1.Container{res.Pod.Spec.InitContainers, res.Pod.Spec.Containers} {
					for i := range list {
						if list[i].Name == container {
							got = &list[i]
						}
					}
				}
				if got == nil || len(got.Resources.Claims) != 1 || got.Resources.Claims[0].Name != "gpufrac-"+container {
					t.Fatalf("container %s claims %+v", container, got)
				}
				tmpl := byName[claims["gpufrac-"+container]]
				if tmpl == nil {
					t.Fatalf("container %s: pod claim does not reference a produced template", container)
				}
				if s := summary(t, tmpl); s != want {
					t.Errorf("container %s:\n got: %s\nwant: %s", container, s, want)
				}
			}
			if res.Pod.Annotations[kai.AnnotationTranslated] == "" {
				t.Error("the translated pod is not marked")
			}
			if tc.pod.Spec.ResourceClaims != nil {
				t.Error("the input pod was modified")
			}
			// A second translation of the result is a no-op.
			if again, err := kai.Translate(res.Pod, kai.Options{GPUMemorySizes: sizes}); again != nil || err != nil {
				t.Errorf("translating twice: %v %v", again, err)
			}
		})
	}
}

func TestSameParametersShareATemplate(t *testing.T) {
	a, _ := kai.Translate(pod(map[string]string{"gpu-memory": "20000"}, "x"), kai.Options{})
	b, _ := kai.Translate(pod(map[string]string{"gpu-memory": "20000"}, "y"), kai.Options{})
	c, _ := kai.Translate(pod(map[string]string{"gpu-memory": "20001"}, "x"), kai.Options{})
	if a.Templates[0].Name != b.Templates[0].Name {
		t.Error("equal parameters gave different template names")
	}
	if a.Templates[0].Name == c.Templates[0].Name {
		t.Error("different parameters gave the same template name")
	}
}

func TestNothingToTranslate(t *testing.T) {
	for name, annotations := range map[string]map[string]string{
		"no annotations":       nil,
		"only the binder's":    {"nvidia.com/container.main.gpus.devices": "GPU-1"},
		"unrelated":            {"prometheus.io/scrape": "true"},
		"translated already":   {"gpu-memory": "1024", kai.AnnotationTranslated: "gpufrac-kai-abc"},
		"a lookalike key only": {"nvidia.com/container.main.gpu-memory.portion.limit": "0.5"},
	} {
		res, err := kai.Translate(pod(annotations, "main"), kai.Options{GPUMemorySizes: sizes})
		if res != nil || err != nil {
			t.Errorf("%s: %v %v", name, res, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	const prefix = "cannot translate KAI GPU-sharing annotations: "
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		sizes       []resource.Quantity
		want        string
	}{
		{"fraction above 1", map[string]string{"gpu-fraction": "1.5"}, sizes,
			`annotation gpu-fraction="1.5": must be a number greater than 0 and less than 1 (a portion of one GPU)`},
		{"fraction not a number", map[string]string{"gpu-fraction": "half"}, sizes,
			`annotation gpu-fraction="half": must be a number greater than 0 and less than 1 (a portion of one GPU)`},
		{"fraction with no gpufrac GPUs", map[string]string{"gpu-fraction": "0.5"}, nil,
			`annotation gpu-fraction="0.5": the cluster has no gpufrac GPUs, so a portion cannot be turned into memory`},
		{"memory not a number", map[string]string{"gpu-memory": "20Gi"}, sizes,
			`annotation gpu-memory="20Gi": must be a positive whole number of MiB`},
		{"both fraction and memory", map[string]string{"gpu-memory": "1024", "gpu-fraction": "0.5"}, sizes,
			`annotation gpu-memory="1024": set gpu-fraction or gpu-memory, not both`},
		{"num-devices alone", map[string]string{"gpu-fraction-num-devices": "2"}, sizes,
			`annotation gpu-fraction-num-devices="2": needs gpu-fraction or gpu-memory beside it`},
		{"num-devices zero", map[string]string{"gpu-memory": "1024", "gpu-fraction-num-devices": "0"}, sizes,
			`annotation gpu-fraction-num-devices="0": must be a positive whole number of GPUs`},
		{"no such container", map[string]string{"gpu-memory": "1024", "gpu-fraction-container-name": "nope"}, sizes,
			`annotation gpu-fraction-container-name="nope": the pod has no container of that name`},
		{"per-container: no such container", map[string]string{"nvidia.com/container.nope.gpu-memory.request": "1Gi"}, sizes,
			`annotation nvidia.com/container.nope.gpu-memory.request="1Gi": the pod has no container "nope"`},
		{"limit below request", map[string]string{"nvidia.com/container.main.gpu-memory.request": "20Gi", "nvidia.com/container.main.gpu-memory.limit": "10Gi"}, sizes,
			`annotation nvidia.com/container.main.gpu-memory.limit="10Gi": must not be below the request 20Gi`},
		{"bad quantity", map[string]string{"nvidia.com/container.main.gpu-memory.request": "lots"}, sizes,
			`annotation nvidia.com/container.main.gpu-memory.request="lots": must be a positive quantity such as 20Gi`},
		{"unknown compute mode", map[string]string{"nvidia.com/container.main.gpu-memory.request": "1Gi", "nvidia.com/container.main.gpu-compute.mode": "mig"}, sizes,
			`annotation nvidia.com/container.main.gpu-compute.mode="mig": must be time-slicing or sm-sharing`},
		{"unknown pod-wide mode", map[string]string{"gpu-memory": "1024", "kai.scheduler/gpu-compute-sharing-mode": "exclusive"}, sizes,
			`annotation kai.scheduler/gpu-compute-sharing-mode="exclusive": must be time-slicing or sm-sharing`},
		{"mode without memory", map[string]string{"nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}, sizes,
			`annotation nvidia.com/container.main.gpu-compute.mode="sm-sharing": container "main" names a compute mode but no gpu-memory request or limit`},
		{"portion below the request on the smaller GPU", map[string]string{"nvidia.com/container.main.gpu-memory.request": "30Gi", "kai.scheduler/container.main.gpu-memory.portion.limit": "0.25"}, sizes,
			`annotation kai.scheduler/container.main.gpu-memory.portion.limit="0.25": on a 81408Mi GPU this is 20352Mi, below the request 30Gi`},
		{"legacy and per-container on one container", map[string]string{"gpu-memory": "1024", "nvidia.com/container.main.gpu-memory.request": "1Gi"}, sizes,
			`annotation nvidia.com/container.main.gpu-memory.request="1Gi": container "main" already gets a GPU from gpu-fraction or gpu-memory; use one scheme per container`},
		{"every problem at once", map[string]string{"gpu-fraction": "2", "gpu-fraction-num-devices": "x"}, sizes,
			`annotation gpu-fraction="2": must be a number greater than 0 and less than 1 (a portion of one GPU); annotation gpu-fraction-num-devices="x": must be a positive whole number of GPUs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := kai.Translate(pod(tc.annotations, "main"), kai.Options{GPUMemorySizes: tc.sizes})
			if err == nil {
				t.Fatalf("translated: %+v", res)
			}
			if err.Error() != prefix+tc.want {
				t.Errorf("\n got: %s\nwant: %s", err.Error(), prefix+tc.want)
			}
		})
	}
}
