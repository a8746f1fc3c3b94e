// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan_test

import (
	"math"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// FuzzComputeConsumed: whatever consumedCapacity two shares of one GPU
// carry (any quantity the API could hold, near int64's edges included), a
// plan that is made gives each a soft and hard limit in (0, what the GPU
// offers] that together stay within it; anything else is refused.
func FuzzComputeConsumed(f *testing.F) {
	for _, seed := range [][2]string{{"40Gi", "1Gi"}, {"-1", "1Gi"}, {"0", "0"}, {"9223372036854775807", "1"}, {"-9223372036854775808", "1"},
		{"9223372036854775808", "1"}, {"1e30", "1"}, {"1e999999999", "1"}, {"1E-30", "1"}, {"500m", "1"}, {"141Gi", "1"}, {"70Gi", "71Gi"}, {"151397597184", "1"}} {
		f.Add(seed[0], seed[1])
	}
	for _, n := range []int64{math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1, 1 << 62, -(1 << 62)} {
		f.Add(strconv.FormatInt(n, 10), "1Gi")
	}
	inv := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	offered := domain.PublishedMemory(inv.GPUs[0].MemoryBytes)
	f.Fuzz(func(t *testing.T, a, b string) {
		qa, okA := apiQuantity(a)
		qb, okB := apiQuantity(b)
		if !okA || !okB {
			return
		}
		c := claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "1"}, {request: "gpu", device: "gpu-0", share: "s2", memory: "1"}})
		c.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": qa}
		c.Status.Allocation.Devices.Results[1].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": qb}
		p, err := plan.Compute(c, inv, plan.Options{NodeName: node, MPSRoot: "/mps"})
		if err != nil {
			if len(err.Error()) > plan.MaxErrorBytes {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		var sum int64
		for _, d := range p.Devices {
			if d.SoftLimitBytes <= 0 || d.SoftLimitBytes > offered.Value() || d.HardLimitBytes <= 0 || d.HardLimitBytes > int64(inv.GPUs[0].MemoryBytes) {
				t.Fatalf("%q, %q: planned share %+v", a, b, d)
			}
			sum += d.SoftLimitBytes
		}
		if g := p.PerGPU(); len(g) != 1 || g[0].SoftLimitBytes != sum || sum > offered.Value() {
			t.Fatalf("%q, %q: per GPU %+v, sum %d over %d", a, b, g, sum, offered.Value())
		}
	})
}

// apiQuantity is the quantity a claim read from the API server can carry
// for text s, for texts within v1alpha1.ParseQuantity's bounds. Beyond
// them resource.ParseQuantity itself can spend minutes ("1E-999999999",
// "461e686218427387904", whose exponent wraps in its int32): the API
// server's decoder pays that before the plugin could see the claim, and
// stores the canonical result. Huge exponents that parse at once
// ("1e999999999") are pinned in TestHostileAllocations instead.
func apiQuantity(s string) (resource.Quantity, bool) {
	q, err := v1alpha1.ParseQuantity(s)
	return q, err == nil
}
