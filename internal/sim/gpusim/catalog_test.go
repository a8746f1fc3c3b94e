// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim

import (
	"reflect"
	"slices"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestCatalogMatchesDiscovery holds pkg/domain's simulated catalog, which
// kubectl-gpufrac builds inventories from without cgo, equal to what NVML
// discovery reads from go-nvml's mock servers, for every model, every kind
// of node, and a node mixing models.
func TestCatalogMatchesDiscovery(t *testing.T) {
	presetNames := make([]string, 0, len(presets))
	for n := range presets {
		presetNames = append(presetNames, n)
	}
	slices.Sort(presetNames)
	if !slices.Equal(presetNames, catalog.Models()) {
		t.Fatalf("go-nvml presets %v, catalog %v: the two must name the same models", presetNames, catalog.Models())
	}
	specs := []string{"h100x4,a100x2,a30x1"}
	for _, m := range catalog.Models() {
		specs = append(specs, m+"x3")
	}
	for _, spec := range specs {
		for _, enf := range []domain.Enforcement{domain.EnforcementDMem, domain.EnforcementMPS, domain.EnforcementNone} {
			node, err := NewNode(spec, "node-a", enf)
			if err != nil {
				t.Fatal(err)
			}
			_, ctx := ktesting.NewTestContext(t)
			discovered, err := nvmldiscovery.Discover(ctx, node.NVML, node.InventoryOptions)
			if err != nil {
				t.Fatalf("%s %s: %v", spec, enf, err)
			}
			built, err := catalog.Inventory(spec, "node-a", enf)
			if err != nil {
				t.Fatalf("%s %s: %v", spec, enf, err)
			}
			if len(discovered.GPUs) == 0 {
				t.Fatalf("%s %s: discovery found no GPUs", spec, enf)
			}
			if !reflect.DeepEqual(discovered, built) {
				t.Errorf("%s %s:\ndiscovered %+v\ncatalog    %+v", spec, enf, *discovered, *built)
			}
		}
	}
}

func TestSimulatedUUIDsDifferPerNodeAndIndex(t *testing.T) {
	seen := map[string]bool{}
	for _, node := range []string{"node-a", "node-b"} {
		for i := range 4 {
			u := catalog.GPUUUID(node, i)
			if seen[u] {
				t.Errorf("%s GPU %d: UUID %s repeats", node, i, u)
			}
			seen[u] = true
		}
	}
}
