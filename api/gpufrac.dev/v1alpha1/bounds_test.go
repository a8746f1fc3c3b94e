// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestBounds(t *testing.T) {
	for _, tc := range []struct {
		perNode int
		want    int
	}{{0, 32}, {8, 8}, {32, 32}, {1000, 32}} {
		if got, source := MaxDevices(tc.perNode); got != tc.want || source == "" {
			t.Errorf("MaxDevices(%d) = %d %q, want %d", tc.perNode, got, source, tc.want)
		}
	}
	q, source := LargestGPU([]resource.Quantity{resource.MustParse("80Gi"), resource.MustParse("141Gi"), resource.MustParse("24Gi")})
	if q.String() != "141Gi" || source != "the cluster publishes" {
		t.Errorf("LargestGPU = %s %q", q.String(), source)
	}
	// No sizes known: the catalog's largest, b200 (184320 MiB, go-nvml's preset).
	q, source = LargestGPU(nil)
	if q.String() != "180Gi" || source != "gpufrac knows (b200 in its simulated catalog; no GPU sizes of a cluster were given)" {
		t.Errorf("LargestGPU(nil) = %s %q", q.String(), source)
	}
}
