// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fragmentation_test

import (
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

const gi = int64(1) << 30

func gpu(pool, node, device string, capGi int64, sharesGi ...int64) fragmentation.GPU {
	g := fragmentation.GPU{Pool: pool, Node: node, Device: device, Capacity: capGi * gi}
	for _, s := range sharesGi {
		g.Shares = append(g.Shares, s*gi)
		g.Guaranteed += s * gi
	}
	return g
}

func freedNames(p fragmentation.Pool) []string {
	var out []string
	for _, f := range p.FreeableGPUs {
		out = append(out, f.Node+"/"+f.Device)
	}
	return out
}

func TestAnalyze(t *testing.T) {
	tainted := gpu("H100", "n2", "gpu-0", 80)
	tainted.Tainted = true
	many := []fragmentation.GPU{}
	for i := range 13 {
		many = append(many, gpu("H100", fmt.Sprintf("n%02d", i), "gpu-0", 80, 1))
	}
	for _, tc := range []struct {
		name                               string
		gpus                               []fragmentation.GPU
		inUse, lowerBound, freeable, total int
		freed                              []string
	}{
		{name: "two half-empty GPUs: one frees",
			gpus:  []fragmentation.GPU{gpu("H100", "n1", "gpu-0", 80, 30), gpu("H100", "n1", "gpu-1", 80, 30)},
			inUse: 2, lowerBound: 1, freeable: 1, total: 2, freed: []string{"n1/gpu-0"}},
		{name: "shares too large to share a GPU: nothing frees",
			gpus:  []fragmentation.GPU{gpu("H100", "n1", "gpu-0", 80, 60), gpu("H100", "n2", "gpu-0", 80, 60)},
			inUse: 2, lowerBound: 2, freeable: 0, total: 2},
		{name: "across nodes, smallest first, best fit, a GPU that took shares is no candidate",
			gpus: []fragmentation.GPU{gpu("H100", "a", "gpu-0", 80, 10, 10), gpu("H100", "b", "gpu-0", 80, 50),
				gpu("H100", "c", "gpu-0", 80, 40), gpu("H100", "d", "gpu-0", 80)},
			inUse: 3, lowerBound: 2, freeable: 1, total: 4, freed: []string{"a/gpu-0"}},
		{name: "an empty GPU is no destination (moving there frees nothing)",
			gpus:  []fragmentation.GPU{gpu("H100", "a", "gpu-0", 80, 60), gpu("H100", "b", "gpu-0", 80)},
			inUse: 1, lowerBound: 1, freeable: 0, total: 2},
		{name: "a tainted GPU takes no moved share",
			gpus:  []fragmentation.GPU{gpu("H100", "n1", "gpu-0", 80, 10), func() fragmentation.GPU { g := tainted; g.Shares, g.Guaranteed = []int64{75 * gi}, 75*gi; return g }()},
			inUse: 2, lowerBound: 2, freeable: 0, total: 2},
		{name: "the tainted GPU's own shares may leave it",
			gpus:  []fragmentation.GPU{gpu("H100", "n1", "gpu-0", 80, 30), func() fragmentation.GPU { g := tainted; g.Shares, g.Guaranteed = []int64{10 * gi}, 10*gi; return g }()},
			inUse: 2, lowerBound: 1, freeable: 1, total: 2, freed: []string{"n2/gpu-0"}},
		{name: "all counted, ten listed",
			gpus:  many,
			inUse: 13, lowerBound: 1, freeable: 12, total: 13,
			// n00's share goes to n01 (equal free memory: name order), which
			// then takes every other share and is the one left.
			freed: []string{"n00/gpu-0", "n02/gpu-0", "n03/gpu-0", "n04/gpu-0", "n05/gpu-0", "n06/gpu-0", "n07/gpu-0", "n08/gpu-0", "n09/gpu-0", "n10/gpu-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pools := fragmentation.Analyze(tc.gpus)
			if len(pools) != 1 {
				t.Fatalf("%d pools, want 1", len(pools))
			}
			p := pools[0]
			if p.InUse != tc.inUse || p.LowerBound != tc.lowerBound || p.Freeable != tc.freeable || p.GPUs != tc.total {
				t.Errorf("in use %d, lower bound %d, freeable %d, GPUs %d; want %d, %d, %d, %d", p.InUse, p.LowerBound, p.Freeable, p.GPUs,
					tc.inUse, tc.lowerBound, tc.freeable, tc.total)
			}
			if got := freedNames(p); !slices.Equal(got, tc.freed) {
				t.Errorf("listed %v, want %v", got, tc.freed)
			}
			if p.LowerBound > p.InUse-p.Freeable {
				t.Errorf("lower bound %d above what the moves reach (%d in use, %d freeable)", p.LowerBound, p.InUse, p.Freeable)
			}
		})
	}
}

func TestAnalyzeSeparatesPoolsAndUsesTheLargestMemory(t *testing.T) {
	pools := fragmentation.Analyze([]fragmentation.GPU{
		gpu("H200", "n1", "gpu-0", 141, 100), gpu("H100", "n2", "gpu-0", 80, 30), gpu("H200", "n3", "gpu-0", 139, 50),
	})
	if len(pools) != 2 || pools[0].Name != "H100" || pools[1].Name != "H200" {
		t.Fatalf("pools %+v, want H100 and H200", pools)
	}
	h200 := pools[1]
	// 150Gi over the largest H200 (141Gi) is 2; the 30Gi H100 share may
	// not move to an H200.
	if h200.GPUMemory != 141*gi || h200.LowerBound != 2 || h200.InUse != 2 || h200.Freeable != 0 {
		t.Errorf("H200 pool %+v", h200)
	}
	if pools[0].Freeable != 0 || pools[0].LowerBound != 1 {
		t.Errorf("H100 pool %+v", pools[0])
	}
}

func TestCollect(t *testing.T) {
	dev := func(name, typ string, capGi int64) resourceapi.Device {
		d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			resourceslices.AttrProductName: {StringValue: ptr.To("H100")}},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{resourceslices.MemoryCapacity: {Value: *resource.NewQuantity(capGi*gi, resource.BinarySI)}}}
		if typ != "" {
			d.Attributes[resourceslices.AttrType] = resourceapi.DeviceAttribute{StringValue: ptr.To(typ)}
		}
		return d
	}
	slice := func(driver, node string, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + driver}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}, Devices: devs}}
	}
	result := func(driver, pool, device string, share string, memory string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: device}
		if share != "" {
			r.ShareID = ptr.To(types.UID(share))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
		}
		return r
	}
	claim := func(name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}}}
	}
	gpus := fragmentation.Collect(
		[]*resourceapi.ResourceSlice{
			slice("gpufrac.dev", "n1", dev("gpu-0", "", 80), dev("gpu-1", "gpu", 80), dev("mig-0", "mig", 10)),
			slice("other.dev", "n1", dev("gpu-0", "", 80)),
		},
		[]*resourceapi.ResourceClaim{
			claim("a", result("gpufrac.dev", "n1", "gpu-0", "s1", "20Gi"), result("gpufrac.dev", "n1", "gpu-0", "s2", "10Gi")),
			claim("whole", result("gpufrac.dev", "n1", "gpu-1", "", "")),
			claim("mig", result("gpufrac.dev", "n1", "mig-0", "", "")),
			claim("other", result("other.dev", "n1", "gpu-0", "s3", "70Gi")),
			claim("bogus", result("gpufrac.dev", "n1", "gpu-0", "s4", "1Ei")),
			{ObjectMeta: metav1.ObjectMeta{Name: "pending"}},
		})
	if len(gpus) != 2 {
		t.Fatalf("%d GPUs %+v, want gpu-0 and gpu-1 (no MIG instance, no other driver)", len(gpus), gpus)
	}
	if g := gpus[0]; g.Device != "gpu-0" || g.Guaranteed != 30*gi || len(g.Shares) != 2 || g.Pool != "H100" {
		t.Errorf("gpu-0 %+v, want 30Gi in two shares (the out-of-range one left out)", g)
	}
	if g := gpus[1]; g.Guaranteed != 80*gi || len(g.Shares) != 1 {
		t.Errorf("gpu-1 %+v, want the whole 80Gi held by the unshared allocation", g)
	}
}
