// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"encoding/json"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestClientAuthMountsTheCA renders controller.clientAuth alone and beside
// cert-manager: the controller gets --client-ca-file on the ConfigMap's
// ca.crt, mounted read-only, and --client-cert-names; the values lint.
func TestClientAuthMountsTheCA(t *testing.T) {
	clientAuth := map[string]any{"caConfigMap": "apiserver-client-ca", "names": []any{"kube-apiserver", "apiserver.example"}}
	for name, controller := range map[string]map[string]any{
		"alone":             {"clientAuth": clientAuth},
		"with cert-manager": {"clientAuth": clientAuth, "certManager": map[string]any{"enabled": true}},
	} {
		t.Run(name, func(t *testing.T) {
			// Before rendering: helm merges the defaults into the values.
			wantCerts := controller["certManager"] != nil
			vs := valueSet{name: "client-auth", release: "gpufrac", namespace: "gpufrac-system", values: map[string]any{"controller": controller}}
			kv := kubeVersion
			for _, m := range lint.AllWithKubeVersion(chartDir, vs.values, vs.namespace, &kv).Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
			objs, _, err := render(loadChart(t), vs)
			if err != nil {
				t.Fatal(err)
			}
			dep := find(objs, "Deployment", "gpufrac-controller")
			if dep == nil {
				t.Fatal("no controller Deployment")
			}
			args := strings.Join(containerArgs(t, dep.Object), " ")
			for _, want := range []string{"--client-ca-file=/etc/gpufrac/client-ca/ca.crt", "--client-cert-names=kube-apiserver,apiserver.example"} {
				if !strings.Contains(args, want) {
					t.Errorf("controller args %s lack %s", args, want)
				}
			}
			raw, _ := json.Marshal(dep.Object["spec"].(map[string]any)["template"])
			pod := string(raw)
			for _, want := range []string{`"configMap":{"items":[{"key":"ca.crt","path":"ca.crt"}],"name":"apiserver-client-ca"}`, `"mountPath":"/etc/gpufrac/client-ca","name":"client-ca","readOnly":true`} {
				if !strings.Contains(pod, want) {
					t.Errorf("pod template lacks %s:\n%s", want, pod)
				}
			}
			if strings.Contains(pod, `"name":"webhook-certs"`) != wantCerts {
				t.Errorf("webhook-certs volume present: %v, want %v:\n%s", !wantCerts, wantCerts, pod)
			}
		})
	}
	// And off (the default): no client CA anywhere.
	objs, _, err := render(loadChart(t), valueSets()[0])
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(containerArgs(t, find(objs, "Deployment", "gpufrac-controller").Object), " "); strings.Contains(args, "client-c") {
		t.Errorf("default install passes %s", args)
	}
}
