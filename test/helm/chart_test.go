// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
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
	"github.com/gpufrac/gpufrac/internal/node/mps"
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

// TestChartMatchesTheRepository keeps the chart's copies of repository
// manifests in step: the built-in DeviceClasses (deployments/deviceclasses.yaml,
// which the demo and the simulator use) and the webhook configurations
// (deployments/webhooks.yaml).
func TestChartMatchesTheRepository(t *testing.T) {
	objs, _, err := render(loadChart(t), valueSets()[0])
	if err != nil {
		t.Fatal(err)
	}
	builtIn, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range builtIn {
		got := find(objs, "DeviceClass", want.Name)
		if got == nil {
			t.Errorf("the chart lacks DeviceClass %s", want.Name)
			continue
		}
		var class resourceapi.DeviceClass
		fromUnstructured(t, got, &class)
		if !equality.Semantic.DeepEqual(class.Spec, want.Spec) {
			t.Errorf("DeviceClass %s differs from deployments/deviceclasses.yaml:\nchart: %+v\nrepository: %+v", want.Name, class.Spec, want.Spec)
		}
	}

	raw, err := os.ReadFile(filepath.Join("..", "..", "deployments", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range splitYAML(string(raw)) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil || len(u.Object) == 0 {
			continue
		}
		got := find(objs, u.GetKind(), u.GetName())
		if got == nil {
			t.Errorf("the chart lacks %s %s of deployments/webhooks.yaml", u.GetKind(), u.GetName())
			continue
		}
		var a, b []admissionv1.MutatingWebhook
		var va, vb []admissionv1.ValidatingWebhook
		switch u.GetKind() {
		case "MutatingWebhookConfiguration":
			var x, y admissionv1.MutatingWebhookConfiguration
			fromUnstructured(t, got, &x)
			fromUnstructured(t, &u, &y)
			a, b = x.Webhooks, y.Webhooks
		case "ValidatingWebhookConfiguration":
			var x, y admissionv1.ValidatingWebhookConfiguration
			fromUnstructured(t, got, &x)
			fromUnstructured(t, &u, &y)
			va, vb = x.Webhooks, y.Webhooks
		case "MutatingAdmissionPolicy":
			sameSpec(t, got, &u, func(p *admissionv1.MutatingAdmissionPolicy) any { return p.Spec })
		case "MutatingAdmissionPolicyBinding":
			sameSpec(t, got, &u, func(b *admissionv1.MutatingAdmissionPolicyBinding) any { return b.Spec })
		default:
			t.Errorf("deployments/webhooks.yaml has a %s, which this test does not compare", u.GetKind())
		}
		if !equality.Semantic.DeepEqual(a, b) || !equality.Semantic.DeepEqual(va, vb) {
			t.Errorf("%s %s differs from deployments/webhooks.yaml", u.GetKind(), u.GetName())
		}
	}
}

// sameSpec reports when the chart's object and the repository's differ in
// spec.
func sameSpec[T any](t *testing.T, chart, repo *unstructured.Unstructured, spec func(*T) any) {
	t.Helper()
	var x, y T
	fromUnstructured(t, chart, &x)
	fromUnstructured(t, repo, &y)
	if !equality.Semantic.DeepEqual(spec(&x), spec(&y)) {
		t.Errorf("%s %s differs from deployments/webhooks.yaml", repo.GetKind(), repo.GetName())
	}
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
	daemonCmds := regexp.MustCompile(`"(/usr/local/bin/[^"]+)"`).FindAllStringSubmatch(mps.DaemonTemplate, -1)
	if len(daemonCmds) == 0 {
		t.Error("the MPS daemon template runs nothing from the plugin's image")
	}
	for _, m := range daemonCmds {
		if !inImage[m[1]] {
			t.Errorf("internal/node/mps/mps-control-daemon.yaml runs %s, which the image does not contain", m[1])
		}
	}
	if len(inImage) < 4 || !slices.Contains(strings.Fields(string(raw)), "USER") {
		t.Errorf("the image holds %d binaries and sets no USER", len(inImage))
	}
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
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
