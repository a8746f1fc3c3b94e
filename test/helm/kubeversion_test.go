// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestChartFloorIsTheCompatibilityTier: the chart installs on the oldest
// release the compatibility tier tests (`make test-compat`, Kubernetes
// v1.36.3) and on the default one, with every value set, and `helm install`
// refuses a 1.35 cluster with the constraint, before anything is created
// (the binaries' start-time check, internal/featureprobe, is what a user who
// bypasses Helm meets).
func TestChartFloorIsTheCompatibilityTier(t *testing.T) {
	ch := loadChart(t)
	for _, kv := range []chartutil.KubeVersion{
		{Version: "v1.36.3", Major: "1", Minor: "36"},
		{Version: "v1.36.0-gke.1200", Major: "1", Minor: "36"},
		kubeVersion,
	} {
		for _, vs := range valueSets() {
			if _, _, err := renderWith(ch, vs, func(c *chartutil.Capabilities) { c.KubeVersion = kv }); err != nil {
				t.Errorf("%s on %s: %v", vs.name, kv.Version, err)
			}
		}
	}
	for _, old := range []chartutil.KubeVersion{
		{Version: "v1.35.4", Major: "1", Minor: "35"},
		{Version: "v1.34.0-eks.3", Major: "1", Minor: "34"},
	} {
		_, _, err := renderWith(ch, valueSets()[0], func(c *chartutil.Capabilities) { c.KubeVersion = old })
		if err == nil || !strings.Contains(err.Error(), ">=1.36.0-0") {
			t.Errorf("rendering for %s: got %v, want the chart's kubeVersion constraint >=1.36.0-0 to refuse it", old.Version, err)
		}
	}
}
