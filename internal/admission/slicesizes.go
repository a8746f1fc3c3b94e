// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// One node's slices must not change the rules for every other node's
// pods: the GPU sizes admission and KAI translation use (the "largest GPU"
// bound, one subrequest per size) come from every slice in the cluster, and
// the node-scoped admission policy lets a node write its own slices,
// bounded, but not lie consistently with the others. So a size counts only
// where it agrees with the other slices of the same GPU model (DESIGN.md,
// "What a slice's memory means"): per productName, the size most pools
// publish wins (a tie goes to the smallest, the stricter bound), and a
// device publishing another size is ignored and reported. No built-in
// catalogue of models decides what is plausible: it would refuse every GPU
// not listed.

// Attribute names read here, as the node publishes them
// (internal/core/resourceslices; the package is not imported, so
// admission stays independent of the node side).
const (
	attrProductName     = "productName"
	attrType            = "type"
	attrMemoryTotalMiB  = "memoryTotalMiB"
	attrServerReserveMi = "mpsServerReserveMiB"
)

// IgnoredSize is one device whose memory differs from what the other
// slices of its model agree on.
type IgnoredSize struct {
	Slice   *resourceapi.ResourceSlice
	Device  string
	Product string
	// Size is the GPU total the device publishes (memoryTotalMiB, or its
	// capacity plus its MPS server reserve on a slice without it); Agreed
	// what its model's other pools do, both to the 256Mi step.
	Size, Agreed resource.Quantity
}

// key identifies the report of one ignored device at one size.
func (i IgnoredSize) key() string {
	return i.Slice.Name + "/" + i.Device + "=" + i.Size.String()
}

// GPUSize is one GPU size the slices agree on: the capacity claims draw
// from and the GPU's total memory, in MiB, that KAI's binder computes from.
type GPUSize struct {
	Capacity resource.Quantity
	TotalMiB int64
}

// sizeVotes counts, for one model, the pools publishing each total.
type sizeVotes struct {
	total resource.Quantity
	pools map[string]bool
}

// ConsistentGPUSizes returns the distinct GPU memory capacities of the
// gpufrac slices in all (smallest first) whose GPUs agree with the other
// slices of the same productName (ConsistentGPUs), and the devices ignored
// for disagreeing.
func ConsistentGPUSizes(all []*resourceapi.ResourceSlice) ([]resource.Quantity, []IgnoredSize) {
	gpus, ignored := ConsistentGPUs(all)
	sizes := make([]resource.Quantity, len(gpus))
	for i := range gpus {
		sizes[i] = gpus[i].Capacity
	}
	return sizes, ignored
}

// ConsistentGPUs returns the distinct GPU capacities of the gpufrac slices
// in all (smallest first), each with its GPU's total, counting a device
// only where its total agrees with the other slices of the same
// productName: per model, the total most pools publish wins (a tie goes
// to the smallest, the stricter bound). Totals are compared, not
// capacities: a node that runs MPS daemons offers its GPUs less the
// server's reserve, and is no less the same model (DESIGN.md, "What a
// slice's memory means"). A capacity above its own total is ignored too.
// Where two totals share one capacity, the larger is given, so a claim
// sized on it asks at least KAI's figure on either GPU.
func ConsistentGPUs(all []*resourceapi.ResourceSlice) ([]GPUSize, []IgnoredSize) {
	votes := map[string][]*sizeVotes{}
	eachGPU(all, func(s *resourceapi.ResourceSlice, _ *resourceapi.Device, product string, _, total resource.Quantity) {
		vs := votes[product]
		i := slices.IndexFunc(vs, func(v *sizeVotes) bool { return v.total.Cmp(total) == 0 })
		if i < 0 {
			vs = append(vs, &sizeVotes{total: total, pools: map[string]bool{}})
			i = len(vs) - 1
			votes[product] = vs
		}
		vs[i].pools[s.Spec.Pool.Name] = true
	})
	agreed := map[string]resource.Quantity{}
	for product, vs := range votes {
		slices.SortFunc(vs, func(a, b *sizeVotes) int {
			if n := len(b.pools) - len(a.pools); n != 0 {
				return n
			}
			return a.total.Cmp(b.total)
		})
		agreed[product] = vs[0].total
	}
	var sizes []GPUSize
	var ignored []IgnoredSize
	eachGPU(all, func(s *resourceapi.ResourceSlice, d *resourceapi.Device, product string, capacity, total resource.Quantity) {
		want := agreed[product]
		if total.Cmp(want) != 0 || capacity.Cmp(total) > 0 {
			ignored = append(ignored, IgnoredSize{Slice: s, Device: d.Name, Product: product, Size: total, Agreed: want})
			return
		}
		totalMiB := totalMiBOf(d, capacity)
		i := slices.IndexFunc(sizes, func(g GPUSize) bool { return g.Capacity.Cmp(capacity) == 0 })
		if i < 0 {
			sizes = append(sizes, GPUSize{Capacity: capacity, TotalMiB: totalMiB})
			return
		}
		sizes[i].TotalMiB = max(sizes[i].TotalMiB, totalMiB)
	})
	slices.SortFunc(sizes, func(a, b GPUSize) int { return a.Capacity.Cmp(b.Capacity) })
	slices.SortFunc(ignored, func(a, b IgnoredSize) int { return strings.Compare(a.key(), b.key()) })
	return sizes, ignored
}

// maxTotalMiB bounds the totals read: 4 TiB, the bound the node-scoped
// admission policy puts on what a node publishes.
const maxTotalMiB = int64(4) << 20

// stepBytes is the capacity step of gpufrac's slices (domain.MemoryStep,
// not imported here).
const stepBytes = int64(256) << 20

// totalMiBOf is the device's GPU total in MiB: memoryTotalMiB, or on a
// slice without it its capacity plus its MPS server reserve (the capacity
// is the total less the reserve, rounded down to the step).
func totalMiBOf(d *resourceapi.Device, capacity resource.Quantity) int64 {
	if a, ok := d.Attributes[attrMemoryTotalMiB]; ok && a.IntValue != nil && *a.IntValue > 0 {
		return min(*a.IntValue, maxTotalMiB)
	}
	c := capacity.Value() >> 20
	if capacity.Cmp(*resource.NewQuantity(maxTotalMiB<<20, resource.BinarySI)) > 0 {
		c = maxTotalMiB
	}
	if a, ok := d.Attributes[attrServerReserveMi]; ok && a.IntValue != nil && *a.IntValue > 0 {
		c += min(*a.IntValue, maxTotalMiB)
	}
	return min(c, maxTotalMiB)
}

// comparableTotal is what devices of one model are compared on: the total
// rounded down to the step, so a slice written before memoryTotalMiB
// (whose total is known only to the step) agrees with one written after.
// A capacity past any bound stays as it is, so it agrees with nothing
// sane.
func comparableTotal(d *resourceapi.Device, capacity resource.Quantity) resource.Quantity {
	if capacity.Cmp(*resource.NewQuantity(maxTotalMiB<<20, resource.BinarySI)) > 0 {
		return capacity.DeepCopy()
	}
	b := totalMiBOf(d, capacity) << 20
	return *resource.NewQuantity(b/stepBytes*stepBytes, resource.BinarySI)
}

// eachGPU calls f for every device of a gpufrac slice that is a fraction
// target: a memory capacity, and type gpu where the type is published
// (a device without it is a GPU: slices of an older plugin).
func eachGPU(all []*resourceapi.ResourceSlice, f func(s *resourceapi.ResourceSlice, d *resourceapi.Device, product string, capacity, total resource.Quantity)) {
	for _, s := range all {
		if s.Spec.Driver != v1alpha1.DriverName {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			capacity, ok := d.Capacity["memory"]
			if !ok {
				continue
			}
			if t, ok := d.Attributes[attrType]; ok && (t.StringValue == nil || *t.StringValue != "gpu") {
				continue
			}
			var product string
			if p, ok := d.Attributes[attrProductName]; ok && p.StringValue != nil {
				product = *p.StringValue
			}
			f(s, d, product, capacity.Value, comparableTotal(d, capacity.Value))
		}
	}
}
