// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package catalog_test

import (
	"reflect"
	"testing"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
)

func TestParseGPUs(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []catalog.Group
		err  string
	}{
		{spec: "h200x8", want: []catalog.Group{{Model: "h200", Count: 8}}},
		{spec: "H100x4, a100x2", want: []catalog.Group{{Model: "h100", Count: 4}, {Model: "a100", Count: 2}}},
		{spec: "h100x1,a100x2:mig=3g.40gb+1g.10gb", want: []catalog.Group{{Model: "h100", Count: 1}, {Model: "a100", Count: 2, MIG: []string{"3g.40gb", "1g.10gb"}}}},
		{spec: "a100x2:3g.40gb", err: `simulated GPUs "a100x2:3g.40gb": "3g.40gb" is not a MIG layout (want mig=PROFILE+PROFILE..., e.g. mig=3g.40gb+1g.10gb)`},
		{spec: "h200", err: `simulated GPUs "h200": "h200" is not MODELxCOUNT (e.g. h200x8)`},
		{spec: "v100x2", err: `simulated GPUs "v100x2": unknown model "v100", known: a100, a100-40g, a30, b200, h100, h200`},
		{spec: "h200x0", err: `simulated GPUs "h200x0": count "0" must be a number from 1 to 256`},
		{spec: "h200xmany", err: `simulated GPUs "h200xmany": count "many" must be a number from 1 to 256`},
	} {
		got, err := catalog.ParseGPUs(tc.spec)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Parse(%q) error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("Parse(%q) = %v, %v; want %v", tc.spec, got, err, tc.want)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], tc.want[i]) {
				t.Errorf("Parse(%q)[%d] = %v, want %v", tc.spec, i, got[i], tc.want[i])
			}
		}
	}
}

// TestLargestModelIsTheAPIBound: the API's bound on one share's memory when
// no cluster is known (v1alpha1.CatalogLargestGPU) is this catalog's
// largest model.
func TestLargestModelIsTheAPIBound(t *testing.T) {
	var most catalog.Model
	for _, n := range catalog.Models() {
		if m, _ := catalog.ModelByName(n); m.MemoryBytes > most.MemoryBytes {
			most = m
		}
	}
	q, name := v1alpha1.CatalogLargestGPU()
	if name != most.Name || q.Value() != int64(most.MemoryBytes) {
		t.Errorf("v1alpha1.CatalogLargestGPU() = %s %s; the catalog's largest model is %s with %d bytes", q.String(), name, most.Name, most.MemoryBytes)
	}
}
