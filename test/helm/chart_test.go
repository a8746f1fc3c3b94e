// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/templates"
)

// TestChartLints runs what `helm lint --strict` runs (Chart.yaml, values
// against the schema, every template rendered and parsed) for each value
// set.
func TestChartLints(t *testing.T) {
	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			kv := kubeVersion
			res := lint.AllWithKubeVersion(chartDir, vs.values, vs.namespace, &kv)
			for _, m := range res.Messages {
				// INFO is advice such as "icon is recommended".
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

// TestEveryValueSetRenders checks the objects each value set must and must
// not produce, and that NOTES.txt tells the user what to run.
func TestEveryValueSetRenders(t *testing.T) {
	ch := loadChart(t)
	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			objs, notes, err := render(ch, vs)
			if err != nil {
				t.Fatal(err)
			}
			k := kinds(objs)
			want := map[string]int{"DaemonSet": 1, "Deployment": 1, "ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 2, "RoleBinding": 2}
			for kind, n := range want {
				if k[kind] != n {
					t.Errorf("%d %s objects, want %d (all: %v)", k[kind], kind, n, k)
				}
			}
			for _, o := range objs {
				if ns := o.GetNamespace(); ns != "" && ns != vs.namespace {
					t.Errorf("%s %s in namespace %q, want the release namespace %q", o.GetKind(), o.GetName(), ns, vs.namespace)
				}
			}
			if !strings.Contains(notes, "kubectl get resourceslices") || !strings.Contains(notes, vs.namespace) {
				t.Errorf("NOTES.txt does not say how to check the install:\n%s", notes)
			}
		})
	}
}

// TestWrongValuesFailWithTheirPath: values.schema.json refuses mistakes at
// install time, naming the value.
func TestWrongValuesFailWithTheirPath(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"kubeletPlugin": map[string]any{"smSharingGPUs": "gpu6"}}, "'/kubeletPlugin/smSharingGPUs': 'gpu6' does not match"},
		{map[string]any{"kubeletPlugin": map[string]any{"cdiRoot": "var/run/cdi"}}, "'/kubeletPlugin/cdiRoot'"},
		{map[string]any{"kubeletPlugin": map[string]any{"rollingUpdates": true}}, "rollingUpdates"},
		{map[string]any{"controller": map[string]any{"replicas": 0}}, "'/controller/replicas'"},
		{map[string]any{"mps": map[string]any{"readyTimeout": "60"}}, "'/mps/readyTimeout'"},
		{map[string]any{"image": map[string]any{"repository": ""}}, "'/image/repository'"},
		{map[string]any{"deviceClasses": map[string]any{"extra": []any{map[string]any{"name": "Mine"}}}}, "'/deviceClasses/extra/0': missing property 'spec'"},
	} {
		_, _, err := render(ch, valueSet{name: "wrong", release: "gpufrac", namespace: "gpufrac-system", values: tc.values})
		if err == nil {
			t.Errorf("values %v rendered; want a schema error naming %s", tc.values, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: error does not name %s:\n%v", tc.values, tc.want, err)
		}
	}
}

// TestChartMatchesTheRepository keeps every copy the chart carries of a
// repository manifest equal to its one source: the built-in DeviceClasses
// (deployments/deviceclasses.yaml, which the demo applies and the simulator
// uses) and the admission configuration (deployments/webhooks.yaml). The
// MPS daemon Pod (templates/mps-control-daemon.yaml) has no copy in
// the chart: mps.template is empty by default, so the plugin runs its
// built-in template, and this test fails if a default copy appears that
// differs from it.
func TestChartMatchesTheRepository(t *testing.T) {
	ch := loadChart(t)
	objs, _, err := render(ch, valueSets()[0])
	if err != nil {
		t.Fatal(err)
	}
	builtIn, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range chartCopyDiffs(objs, builtIn, deployments.Webhooks) {
		t.Error(d)
	}
	mpsValues, _ := ch.Values["mps"].(map[string]any)
	if tmpl, _ := mpsValues["template"].(string); tmpl != "" && tmpl != templates.MPSControlDaemon {
		t.Error("values.yaml's mps.template is a copy of the MPS daemon Pod that differs from templates/mps-control-daemon.yaml")
	}
}

// TestChartWholeGPUClassMatchesTheRepository: with
// deviceClasses.nvidiaGPU the chart renders
// deployments/whole-gpu-deviceclass.yaml, and without it (the default) no
// class of the chart takes nvidia.com/gpu.
func TestChartWholeGPUClassMatchesTheRepository(t *testing.T) {
	ch := loadChart(t)
	whole, err := deployments.WholeGPUDeviceClassObject()
	if err != nil {
		t.Fatal(err)
	}
	on, _, err := render(ch, valueSets()[1])
	if err != nil {
		t.Fatal(err)
	}
	var class resourceapi.DeviceClass
	if got := find(on, "DeviceClass", whole.Name); got == nil {
		t.Errorf("deviceClasses.nvidiaGPU: the chart lacks DeviceClass %s", whole.Name)
	} else if err := convert(got, &class); err != nil || !equality.Semantic.DeepEqual(class.Spec, whole.Spec) {
		t.Errorf("DeviceClass %s differs from deployments/whole-gpu-deviceclass.yaml (%v):\nchart: %+v\nrepository: %+v", whole.Name, err, class.Spec, whole.Spec)
	}
	off, _, err := render(ch, valueSets()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range off {
		if o.GetKind() == "DeviceClass" {
			if name, _, _ := unstructured.NestedString(o.Object, "spec", "extendedResourceName"); name != "" {
				t.Errorf("by default DeviceClass %s takes %s", o.GetName(), name)
			}
		}
	}
}

// TestChartCopyDiffsFindsAPlantedDifference: the comparison above reports a
// chart whose copy differs, planted in memory, in each kind it compares,
// and a copy missing from either side.
func TestChartCopyDiffsFindsAPlantedDifference(t *testing.T) {
	objs, _, err := render(loadChart(t), valueSets()[0])
	if err != nil {
		t.Fatal(err)
	}
	builtIn, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	if d := chartCopyDiffs(objs, builtIn, deployments.Webhooks); len(d) != 0 {
		t.Fatalf("the chart as it is differs: %q", d)
	}
	// first returns the first element of the list at path in o's object,
	// itself, not a copy.
	first := func(o *unstructured.Unstructured, path ...string) map[string]any {
		v, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
		l, _ := v.([]any)
		if len(l) == 0 {
			t.Fatalf("%s %s has no %v", o.GetKind(), o.GetName(), path)
		}
		return l[0].(map[string]any)
	}
	for _, tc := range []struct {
		name, kind, object string
		plant              func(o *unstructured.Unstructured) *unstructured.Unstructured // nil drops the object
		beside             bool                                                          // the original stays, the planted copy joins it
	}{
		{"a class's selector", "DeviceClass", "gpufrac.dev", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			first(o, "spec", "selectors")["cel"] = map[string]any{"expression": `device.driver == "gpufrac.dev"`}
			return o
		}, false},
		{"a class's config", "DeviceClass", "sm-sharing.gpufrac.dev", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			params := first(o, "spec", "config")["opaque"].(map[string]any)["parameters"].(map[string]any)
			params["computeMode"] = "TimeSlicing"
			return o
		}, false},
		{"a class missing", "DeviceClass", "gpufrac.dev", nil, false},
		{"a class the source lacks", "DeviceClass", "gpufrac.dev", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			o.SetName("extra.gpufrac.dev")
			return o
		}, true},
		{"a mutating webhook's failure policy", "MutatingWebhookConfiguration", "gpufrac", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			w := first(o, "webhooks")
			if w["failurePolicy"] == "Fail" {
				w["failurePolicy"] = "Ignore"
			} else {
				w["failurePolicy"] = "Fail"
			}
			return o
		}, false},
		{"a validating webhook's timeout", "ValidatingWebhookConfiguration", "gpufrac", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			first(o, "webhooks")["timeoutSeconds"] = int64(29)
			return o
		}, false},
		{"the policy's match condition", "MutatingAdmissionPolicy", "gpufrac-packing", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			first(o, "spec", "matchConditions")["expression"] = "true"
			return o
		}, false},
		{"the binding's parameter", "MutatingAdmissionPolicyBinding", "gpufrac-packing", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			if err := unstructured.SetNestedField(o.Object, "elsewhere", "spec", "paramRef", "name"); err != nil {
				t.Fatal(err)
			}
			return o
		}, false},
		{"the binding missing", "MutatingAdmissionPolicyBinding", "gpufrac-packing", nil, false},
		{"the one-guarantee policy's validation", "ValidatingAdmissionPolicy", "gpufrac-one-guarantee", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			first(o, "spec", "validations")["expression"] = "true"
			return o
		}, false},
		{"the one-guarantee binding missing", "ValidatingAdmissionPolicyBinding", "gpufrac-one-guarantee", nil, false},
		{"a webhook configuration the source lacks", "ValidatingWebhookConfiguration", "gpufrac", func(o *unstructured.Unstructured) *unstructured.Unstructured {
			o.SetName("gpufrac-extra")
			return o
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var planted []*unstructured.Unstructured
			found := false
			for _, o := range objs {
				if o.GetKind() != tc.kind || o.GetName() != tc.object {
					planted = append(planted, o.DeepCopy())
					continue
				}
				found = true
				switch {
				case tc.plant == nil: // dropped
				case tc.beside:
					planted = append(planted, o.DeepCopy(), tc.plant(o.DeepCopy()))
				default:
					planted = append(planted, tc.plant(o.DeepCopy()))
				}
			}
			if !found {
				t.Fatalf("the chart renders no %s %s", tc.kind, tc.object)
			}
			d := chartCopyDiffs(planted, builtIn, deployments.Webhooks)
			if len(d) == 0 {
				t.Errorf("a chart with %s planted passes as equal to the repository", tc.name)
			}
			t.Logf("reported: %q", d)
		})
	}
}

// copyKinds are the kinds of the chart's objects that are copies of a
// repository manifest: every one must have its source.
var copyKinds = []string{"DeviceClass", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}

// chartCopyDiffs lists where the chart's objects (a default install) and
// the repository's manifests differ: a DeviceClass of classes or an object
// of webhooks (deployments/webhooks.yaml) that the chart lacks or renders
// differently, and a chart object of copyKinds that neither holds.
// Metadata the chart adds (labels, the cert-manager annotation) is not
// compared: the spec is, and a webhook configuration's webhooks.
func chartCopyDiffs(objs []*unstructured.Unstructured, classes []*resourceapi.DeviceClass, webhooks string) []string {
	var diffs []string
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	inSource := map[string]bool{}
	for _, want := range classes {
		inSource["DeviceClass/"+want.Name] = true
		got := find(objs, "DeviceClass", want.Name)
		if got == nil {
			add("the chart lacks DeviceClass %s of deployments/deviceclasses.yaml", want.Name)
			continue
		}
		var class resourceapi.DeviceClass
		if err := convert(got, &class); err != nil {
			add("%v", err)
			continue
		}
		if !equality.Semantic.DeepEqual(class.Spec, want.Spec) {
			add("DeviceClass %s differs from deployments/deviceclasses.yaml:\nchart: %+v\nrepository: %+v", want.Name, class.Spec, want.Spec)
		}
	}

	docs, err := splitYAML(webhooks)
	if err != nil {
		add("deployments/webhooks.yaml: %v", err)
	}
	for i, doc := range docs {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			add("deployments/webhooks.yaml, document %d: %v", i, err)
			continue
		}
		if len(u.Object) == 0 {
			continue
		}
		inSource[u.GetKind()+"/"+u.GetName()] = true
		got := find(objs, u.GetKind(), u.GetName())
		if got == nil {
			add("the chart lacks %s %s of deployments/webhooks.yaml", u.GetKind(), u.GetName())
			continue
		}
		var same bool
		var err error
		switch u.GetKind() {
		case "MutatingWebhookConfiguration":
			same, err = sameIn(got, &u, func(c *admissionv1.MutatingWebhookConfiguration) any { return c.Webhooks })
		case "ValidatingWebhookConfiguration":
			same, err = sameIn(got, &u, func(c *admissionv1.ValidatingWebhookConfiguration) any { return c.Webhooks })
		case "MutatingAdmissionPolicy":
			same, err = sameIn(got, &u, func(p *admissionv1.MutatingAdmissionPolicy) any { return p.Spec })
		case "MutatingAdmissionPolicyBinding":
			same, err = sameIn(got, &u, func(b *admissionv1.MutatingAdmissionPolicyBinding) any { return b.Spec })
		case "ValidatingAdmissionPolicy":
			same, err = sameIn(got, &u, func(p *admissionv1.ValidatingAdmissionPolicy) any { return p.Spec })
		case "ValidatingAdmissionPolicyBinding":
			same, err = sameIn(got, &u, func(b *admissionv1.ValidatingAdmissionPolicyBinding) any { return b.Spec })
		default:
			add("deployments/webhooks.yaml has a %s, which this test does not compare", u.GetKind())
			continue
		}
		if err != nil {
			add("%v", err)
		} else if !same {
			add("%s %s differs from deployments/webhooks.yaml", u.GetKind(), u.GetName())
		}
	}

	for _, o := range objs {
		if slices.Contains(copyKinds, o.GetKind()) && !inSource[o.GetKind()+"/"+o.GetName()] {
			add("the chart renders %s %s, which deployments/ does not hold", o.GetKind(), o.GetName())
		}
	}
	return diffs
}

// sameIn reports whether the chart's object and the repository's agree in
// the part part picks.
func sameIn[T any](chart, repo *unstructured.Unstructured, part func(*T) any) (bool, error) {
	var x, y T
	if err := convert(chart, &x); err != nil {
		return false, err
	}
	if err := convert(repo, &y); err != nil {
		return false, err
	}
	return equality.Semantic.DeepEqual(part(&x), part(&y)), nil
}

// TestImageHasWhatTheChartRuns: the Dockerfile cannot be built here (no
// container engine), so this checks its contract: it copies each binary
// `make build` builds (one per cmd/ directory) to /usr/local/bin, and every
// command the chart runs is one of them.
func TestImageHasWhatTheChartRuns(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deployments", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	copyRe := regexp.MustCompile(`(?m)^COPY --from=build /out/(\S+) (\S+)$`)
	inImage := map[string]bool{}
	for _, m := range copyRe.FindAllStringSubmatch(string(raw), -1) {
		if m[2] != "/usr/local/bin/"+m[1] {
			t.Errorf("Dockerfile copies %s to %s; the chart expects /usr/local/bin/%s", m[1], m[2], m[1])
		}
		inImage[m[2]] = true
	}
	if !strings.Contains(string(raw), "go build -trimpath -ldflags \"-s -w -X github.com/gpufrac/gpufrac/internal/buildinfo.Version=${VERSION}\" -o /out/ ./cmd/...") {
		t.Error("the Dockerfile no longer builds ./cmd/... as `make build` does")
	}
	cmds, err := os.ReadDir(filepath.Join("..", "..", "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if c.IsDir() && !inImage["/usr/local/bin/"+c.Name()] {
			t.Errorf("make build builds %s but the image does not contain it", c.Name())
		}
	}
	for _, vs := range valueSets() {
		objs, _, err := render(loadChart(t), vs)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			for _, field := range [][]string{{"spec", "template", "spec", "containers"}, {"spec", "template", "spec", "initContainers"}} {
				containers, _, _ := unstructured.NestedSlice(o.Object, field...)
				for _, c := range containers {
					cmd, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "command")
					if len(cmd) == 0 || !inImage[cmd[0]] {
						t.Errorf("%s: %s %s runs %v, which the image does not contain", vs.name, o.GetKind(), o.GetName(), cmd)
					}
				}
			}
		}
	}
	// The MPS daemon Pods run the plugin's image too: every program their
	// template starts from the image (containers and probes) must be in it.
	daemonCmds := regexp.MustCompile(`"(/usr/local/bin/[^"]+)"`).FindAllStringSubmatch(templates.MPSControlDaemon, -1)
	if len(daemonCmds) == 0 {
		t.Error("the MPS daemon template runs nothing from the plugin's image")
	}
	for _, m := range daemonCmds {
		if !inImage[m[1]] {
			t.Errorf("templates/mps-control-daemon.yaml runs %s, which the image does not contain", m[1])
		}
	}
	if len(inImage) < 4 || !slices.Contains(strings.Fields(string(raw)), "USER") {
		t.Errorf("the image holds %d binaries and sets no USER", len(inImage))
	}
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := convert(u, into); err != nil {
		t.Fatal(err)
	}
}

// convert fills into from u, refusing fields into's type lacks.
func convert(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// TestKubernetesAPIReachesBothContainers: kubernetesAPI overrides the
// kubelet's KUBERNETES_SERVICE_HOST/PORT in the plugin and the controller,
// and only when set.
func TestKubernetesAPIReachesBothContainers(t *testing.T) {
	ch := loadChart(t)
	for _, vs := range valueSets() {
		objs, _, err := render(ch, vs)
		if err != nil {
			t.Fatal(err)
		}
		_, set := vs.values["kubernetesAPI"]
		for _, o := range objs {
			if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
				continue
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
			got := map[string]string{}
			for _, e := range env {
				m := e.(map[string]any)
				if v, ok := m["value"].(string); ok {
					got[m["name"].(string)] = v
				}
			}
			want := map[string]string{}
			if set {
				want = map[string]string{"KUBERNETES_SERVICE_HOST": "10.20.30.40", "KUBERNETES_SERVICE_PORT": "6443"}
			}
			for _, k := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
				if got[k] != want[k] {
					t.Errorf("%s: %s %s has %s=%q, want %q", vs.name, o.GetKind(), o.GetName(), k, got[k], want[k])
				}
			}
		}
	}
}
