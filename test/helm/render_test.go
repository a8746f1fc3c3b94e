// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/internal/yamldocs"
	"github.com/gpufrac/gpufrac/templates"
)

// chartDir is the chart under test, relative to this package.
var chartDir = filepath.Join("..", "..", "deployments", "helm", "gpufrac")

// kubeVersion is the API server the harness runs; the chart is rendered for it.
var kubeVersion = chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// servedSince136 are the APIs the chart asks the cluster about
// (.Capabilities.APIVersions.Has) that Helm's default capabilities lack.
var servedSince136 = []string{
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding",
}

// valueSet is one way a platform team installs the chart.
type valueSet struct {
	name      string
	release   string
	namespace string
	values    map[string]any
}

// valueSets are the default install and two installs that turn most
// switches the other way, so every branch of the templates reaches the API
// server.
func valueSets() []valueSet {
	return []valueSet{
		{name: "default", release: "gpufrac", namespace: "gpufrac-system", values: map[string]any{}},
		{name: "operator-driver-sm-sharing", release: "acme", namespace: "gpu-operators", values: map[string]any{
			"image": map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
			"kubeletPlugin": map[string]any{
				"nvidiaDriverRoot": "/run/nvidia/driver", "smSharingGPUs": "6,7", "ignoredXIDs": []any{13, 43},
				"nvidiaRuntimeConfigDir": "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime",
				"rollingUpdate":          false, "extraArgs": []any{"--logging-format=json"},
				"nodeSelector": map[string]any{"node.kubernetes.io/instance-type": "p5.48xlarge"},
			},
			"mps":        map[string]any{"enabled": true, "template": templates.MPSControlDaemon, "readyTimeout": "2m"},
			"controller": map[string]any{"replicas": 1, "kaiTranslation": false, "excludedNamespaces": []any{"monitoring"}, "hamiTranslation": "all"},
			"deviceClasses": map[string]any{"nvidiaGPU": true, "extra": []any{map[string]any{
				"name": "dmem.gpufrac.dev",
				"spec": map[string]any{"selectors": []any{map[string]any{"cel": map[string]any{
					"expression": `device.driver == "gpufrac.dev" && device.attributes["gpufrac.dev"].memoryEnforcement == "dmem"`,
				}}}},
			}}},
			"serviceMonitor":  map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
			"alerts":          map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
			"dashboards":      map[string]any{"enabled": true, "annotations": map[string]any{"grafana_folder": "GPUs"}},
			"kubernetesAPI":   map[string]any{"host": "10.20.30.40", "port": 6443},
			"nvidiaEnvPolicy": map[string]any{"enabled": true, "validationActions": []any{"Warn", "Audit"}, "excludedNamespaces": []any{"gpu-operator"}},
		}},
		{name: "bare", release: "gpu", namespace: "kube-gpu", values: map[string]any{
			"fullnameOverride": "gf",
			"imagePullSecrets": []any{map[string]any{"name": "registry"}},
			"deviceClasses":    map[string]any{"builtIn": false},
			"controller": map[string]any{"configValidation": false, "replicas": 3,
				"packing": map[string]any{"admissionPolicy": false}},
			// Set by platform teams that bring their own admission policy.
			"resourceSlicePolicy": false,
		}},
	}
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart %s: %v", chartDir, err)
	}
	return ch
}

// render does what `helm template` does: schema validation, the
// kubeVersion constraint, then the templates. It returns the objects in file
// order, and NOTES.txt.
func render(ch *chart.Chart, vs valueSet) ([]*unstructured.Unstructured, string, error) {
	return renderWith(ch, vs, nil)
}

// renderWith renders with the capabilities edit changes.
func renderWith(ch *chart.Chart, vs valueSet, edit func(*chartutil.Capabilities)) ([]*unstructured.Unstructured, string, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	// What the harness's kube-apiserver serves besides Helm's defaults,
	// as discovery would tell `helm install` (GA in 1.36).
	caps.APIVersions = append(slices.Clone(caps.APIVersions), servedSince136...)
	if edit != nil {
		edit(caps)
	}
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, "", fmt.Errorf("chart kubeVersion %q excludes %s", ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	vals, err := chartutil.ToRenderValues(ch, vs.values, chartutil.ReleaseOptions{
		Name: vs.release, Namespace: vs.namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, "", err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, "", err
	}
	var objs []*unstructured.Unstructured
	var notes string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			notes = files[name]
			continue
		}
		docs, err := splitYAML(files[name])
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", name, err)
		}
		for i, doc := range docs {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				return nil, "", fmt.Errorf("%s, document %d: %w\n%s", name, i, err, doc)
			}
			if len(m) == 0 {
				continue
			}
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs, notes, nil
}

// splitYAML is the documents of s, as gpufrac reads manifests
// (internal/yamldocs).
func splitYAML(s string) ([]string, error) {
	var docs []string
	for doc, err := range yamldocs.All([]byte(s)) {
		if err != nil {
			return nil, err
		}
		docs = append(docs, string(doc))
	}
	return docs, nil
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.GetKind()]++
	}
	return out
}
