// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"slices"
	"strings"
	"testing"
)

// TestCertManagerDelegation renders controller.certManager.enabled (the
// harness has no cert-manager CRDs, so this is not among valueSets): the
// controller reads the mounted Certificate's Secret and touches neither
// Secrets nor caBundles, and cert-manager's CA injector is pointed at the
// Certificate.
func TestCertManagerDelegation(t *testing.T) {
	objs, _, err := render(loadChart(t), valueSet{name: "cert-manager", release: "gpufrac", namespace: "gpufrac-system",
		values: map[string]any{"controller": map[string]any{"certManager": map[string]any{"enabled": true}}}})
	if err != nil {
		t.Fatal(err)
	}
	cert := find(objs, "Certificate", "gpufrac-webhook")
	if cert == nil || find(objs, "Issuer", "gpufrac-selfsigned") == nil {
		t.Fatal("no Certificate and self-signed Issuer rendered")
	}
	if got, _, _ := unstructuredString(cert.Object, "spec", "secretName"); got != "gpufrac-webhook-tls" {
		t.Errorf("Certificate secretName %q", got)
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		o := find(objs, kind, "gpufrac")
		if o == nil || o.GetAnnotations()["cert-manager.io/inject-ca-from"] != "gpufrac-system/gpufrac-webhook" {
			t.Errorf("%s is not injected from the Certificate: %v", kind, o)
		}
	}
	dep := find(objs, "Deployment", "gpufrac-controller")
	if dep == nil {
		t.Fatal("no controller Deployment")
	}
	rendered := strings.Join(containerArgs(t, dep.Object), " ")
	if !strings.Contains(rendered, "--cert-dir=/etc/gpufrac/webhook-certs") || strings.Contains(rendered, "--cert-secret") {
		t.Errorf("controller args %s", rendered)
	}
	role := find(objs, "Role", "gpufrac-controller")
	rules, _ := role.Object["rules"].([]any)
	for _, r := range rules {
		if res, _ := r.(map[string]any)["resources"].([]any); slices.Contains(res, any("secrets")) {
			t.Errorf("the controller may still write Secrets under cert-manager: %v", rules)
		}
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func containerArgs(t *testing.T, dep map[string]any) []string {
	t.Helper()
	spec := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	var out []string
	for _, c := range spec["containers"].([]any) {
		for _, a := range c.(map[string]any)["args"].([]any) {
			out = append(out, a.(string))
		}
	}
	return slices.Clip(out)
}
