// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestPackingPolicyFollowsTheCluster: with controller.packing.admissionPolicy
// auto (the default), the packing MutatingAdmissionPolicy, its binding,
// the controller's --packing-parameter and its ConfigMap rights are
// rendered exactly when the cluster serves the API (Kubernetes 1.36 and
// later); true and false force it either way.
func TestPackingPolicyFollowsTheCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy any // nil: the default
		served bool
		want   bool
	}{
		{name: "auto, served", served: true, want: true},
		{name: "auto, not served (before 1.36)", served: false, want: false},
		{name: "false", policy: false, served: true, want: false},
		{name: "true, not served", policy: true, served: false, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packing := map[string]any{}
			if tc.policy != nil {
				packing["admissionPolicy"] = tc.policy
			}
			vs := valueSet{name: tc.name, release: "gpufrac", namespace: "gpufrac-system",
				values: map[string]any{"controller": map[string]any{"packing": packing}}}
			objs, _, err := renderWith(loadChart(t), vs, func(caps *chartutil.Capabilities) {
				if !tc.served {
					caps.APIVersions = slices.DeleteFunc(caps.APIVersions, func(v string) bool { return slices.Contains(servedSince136, v) })
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			policy := find(objs, "MutatingAdmissionPolicy", "gpufrac-packing")
			binding := find(objs, "MutatingAdmissionPolicyBinding", "gpufrac-packing")
			args := strings.Join(containerArgs(t, find(objs, "Deployment", "gpufrac-controller").Object), " ")
			param := strings.Contains(args, "--packing-parameter=gpufrac-packing")
			rights := false
			rules, _ := find(objs, "Role", "gpufrac-controller").Object["rules"].([]any)
			for _, r := range rules {
				names, _ := r.(map[string]any)["resourceNames"].([]any)
				rights = rights || slices.Contains(names, any("gpufrac-packing"))
			}
			if got := []bool{policy != nil, binding != nil, param, rights}; !slices.Equal(got, []bool{tc.want, tc.want, tc.want, tc.want}) {
				t.Errorf("policy, binding, --packing-parameter, ConfigMap rights rendered: %v, want all %v", got, tc.want)
			}
			if binding != nil {
				ns, _, _ := unstructuredString(binding.Object, "spec", "paramRef", "namespace")
				name, _, _ := unstructuredString(binding.Object, "spec", "paramRef", "name")
				if ns != "gpufrac-system" || name != "gpufrac-packing" {
					t.Errorf("binding reads the parameter %s/%s, want gpufrac-system/gpufrac-packing", ns, name)
				}
			}
		})
	}
}
