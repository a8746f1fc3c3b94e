// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// cp is one control plane for the package's API-server tests.
var cp *harness.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	var err error
	cp, err = harness.Start(context.Background(), harness.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "helm tests: starting the control plane: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "helm tests: control plane ready in %s\n", time.Since(start).Round(100*time.Millisecond))
	code := m.Run()
	if err := cp.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "helm tests: stopping the control plane: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// applier server-side applies unstructured objects as the admin.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.Client.Discovery()))}
}

func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if d, ok := a.mapper.(*restmapper.DeferredDiscoveryRESTMapper); ok {
			d.Reset()
			mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: the API server does not serve %s: %w", o.GetKind(), o.GetName(), gvk, err)
		}
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(mapping.Resource), nil
}

// apply server-side applies o; dryRun asks the API server to validate and
// admit it (defaulting, validation, admission) without storing it.
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	r, err := a.resource(o)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: "helm-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := r.Apply(ctx, o.GetName(), o, opts); err != nil {
		return fmt.Errorf("%s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

func ensureNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// serviceMonitorCRD stands in for the Prometheus operator's CRD: the harness
// has no operator, and the ServiceMonitor's own schema is the operator's
// business. It makes the kind served, so the rest of the object (metadata,
// namespace, labels) still meets the API server.
var serviceMonitorCRD = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
	"metadata": map[string]any{"name": "servicemonitors.monitoring.coreos.com"},
	"spec": map[string]any{
		"group": "monitoring.coreos.com", "scope": "Namespaced",
		"names": map[string]any{"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor", "listKind": "ServiceMonitorList"},
		"versions": []any{map[string]any{
			"name": "v1", "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
		}},
	},
}}

// prometheusRuleCRD stands in for the operator's PrometheusRule CRD, as
// serviceMonitorCRD does; the rules themselves are checked by promtool
// (test/alerts) and TestPrometheusRuleCarriesTheRuleFile.
var prometheusRuleCRD = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
	"metadata": map[string]any{"name": "prometheusrules.monitoring.coreos.com"},
	"spec": map[string]any{
		"group": "monitoring.coreos.com", "scope": "Namespaced",
		"names": map[string]any{"plural": "prometheusrules", "singular": "prometheusrule", "kind": "PrometheusRule", "listKind": "PrometheusRuleList"},
		"versions": []any{map[string]any{
			"name": "v1", "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
		}},
	},
}}

// TestEveryRenderedObjectPassesTheAPIServer applies every object of every
// value set to kube-apiserver v1.37.2 with server-side dry run: schema
// validation, defaulting and the admission chain (Pod Security is the
// namespace's business) all run on what `helm install` would send.
func TestEveryRenderedObjectPassesTheAPIServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := newApplier(t)
	for _, crd := range []*unstructured.Unstructured{serviceMonitorCRD, prometheusRuleCRD} {
		if err := a.apply(ctx, crd, false); err != nil {
			t.Fatal(err)
		}
	}
	ch := loadChart(t)
	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			objs, _, err := render(ch, vs)
			if err != nil {
				t.Fatal(err)
			}
			ensureNamespace(ctx, t, vs.namespace)
			for _, o := range objs {
				err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					err := a.apply(ctx, o, true)
					// The CRD's kind takes a moment to be served.
					if err != nil && (o.GetKind() == "ServiceMonitor" || o.GetKind() == "PrometheusRule") && strings.Contains(err.Error(), "does not serve") {
						return false, nil
					}
					return true, err
				})
				if err != nil {
					t.Errorf("refused: %v", err)
				}
			}
			t.Logf("%d objects accepted: %v", len(objs), kinds(objs))
		})
	}
}
