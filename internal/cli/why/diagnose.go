// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// alt is one way to satisfy a request: the request itself, or one of its
// firstAvailable subrequests.
type alt struct {
	claim       *resourceapi.ResourceClaim
	request     string // request, or request/subrequest
	parent      string // the request it belongs to
	class       string
	selectors   []resourceapi.DeviceSelector
	all         bool // allocationMode All
	count       int64
	tolerations []resourceapi.DeviceToleration
	capacity    *resourceapi.CapacityRequirements
}

// alts lists a claim's requests as alternatives, grouped by request.
func alts(c *resourceapi.ResourceClaim) [][]alt {
	var out [][]alt
	for _, r := range c.Spec.Devices.Requests {
		if e := r.Exactly; e != nil {
			out = append(out, []alt{{claim: c, request: r.Name, parent: r.Name, class: e.DeviceClassName, selectors: e.Selectors,
				all: e.AllocationMode == resourceapi.DeviceAllocationModeAll, count: max(e.Count, 1),
				tolerations: e.Tolerations, capacity: e.Capacity}})
			continue
		}
		var group []alt
		for _, s := range r.FirstAvailable {
			group = append(group, alt{claim: c, request: r.Name + "/" + s.Name, parent: r.Name, class: s.DeviceClassName, selectors: s.Selectors,
				all: s.AllocationMode == resourceapi.DeviceAllocationModeAll, count: max(s.Count, 1),
				tolerations: s.Tolerations, capacity: s.Capacity})
		}
		out = append(out, group)
	}
	return out
}

func (a alt) claimName() string { return a.claim.Namespace + "/" + a.claim.Name }

// need is the guaranteed memory a share of a takes on dev: the requested
// memory (or the policy's default, the whole GPU) rounded up onto the
// device's request policy, as the allocator rounds it.
func need(a alt, dev resourceapi.Device) (bytes int64, named bool) {
	c := dev.Capacity[resourceslices.MemoryCapacity]
	total := c.Value.Value()
	p := c.RequestPolicy
	var q *resource.Quantity
	if a.capacity != nil {
		if v, ok := a.capacity.Requests[resourceslices.MemoryCapacity]; ok {
			q, named = &v, true
		}
	}
	if q == nil {
		if p == nil || p.Default == nil {
			return total, false
		}
		q = p.Default
	}
	v := q.Value()
	if p == nil {
		return v, named
	}
	if r := p.ValidRange; r != nil && r.Min != nil {
		lo := r.Min.Value()
		if v < lo {
			v = lo
		}
		if r.Step != nil && r.Step.Value() > 0 {
			step := r.Step.Value()
			v = lo + (v-lo+step-1)/step*step
		}
	}
	for _, vv := range p.ValidValues {
		if vv.Value() >= v {
			return vv.Value(), named
		}
	}
	return v, named
}

// floorOnPolicy is the largest request at most free that dev's policy
// allows, or 0 when none does.
func floorOnPolicy(free int64, dev resourceapi.Device) int64 {
	p := dev.Capacity[resourceslices.MemoryCapacity].RequestPolicy
	if p == nil || p.ValidRange == nil || p.ValidRange.Min == nil {
		return free
	}
	lo := p.ValidRange.Min.Value()
	if free < lo {
		return 0
	}
	if p.ValidRange.Step == nil || p.ValidRange.Step.Value() <= 0 {
		return free
	}
	step := p.ValidRange.Step.Value()
	return lo + (free-lo)/step*step
}

// excludedBy names the first selector (class first, then the request's)
// that rules dev out for a, or "" when every selector matches.
func (w *world) excludedBy(ctx context.Context, a alt, info deviceInfo) string {
	class, ok := w.classes[a.class]
	if !ok {
		return fmt.Sprintf("DeviceClass %s (not found)", a.class)
	}
	dev := cel.Device{Driver: info.driver, AllowMultipleAllocations: info.dev.AllowMultipleAllocations,
		Attributes: info.dev.Attributes, Capacity: info.dev.Capacity}
	check := func(sels []resourceapi.DeviceSelector, owner string) string {
		for _, s := range sels {
			if s.CEL == nil {
				continue
			}
			r := w.cache.GetOrCompile(s.CEL.Expression)
			if r.Error != nil {
				return fmt.Sprintf("%s selector %q (does not compile: %v)", owner, s.CEL.Expression, r.Error)
			}
			match, _, err := r.DeviceMatches(ctx, dev)
			if err != nil {
				return fmt.Sprintf("%s selector %q (fails: %v)", owner, s.CEL.Expression, err)
			}
			if !match {
				return fmt.Sprintf("%s selector %q", owner, s.CEL.Expression)
			}
		}
		return ""
	}
	if s := check(class.Spec.Selectors, "DeviceClass "+a.class); s != "" {
		return s
	}
	return check(a.selectors, "request "+a.request)
}

// untolerated lists dev's taints that keep a off it (NoSchedule and
// NoExecute, as the allocator counts them).
func untolerated(a alt, dev resourceapi.Device) []string {
	var out []string
	for _, t := range dev.Taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		tolerated := false
		for _, tol := range a.tolerations {
			tolerated = tolerated || resourceclaim.ToleratesTaint(tol, t)
		}
		if !tolerated {
			out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
		}
	}
	return out
}

// altDiag is what one alternative finds on one node.
type altDiag struct {
	a      alt
	fits   bool
	reason *Reason
	// eligible are the devices the selectors and taints allow, with
	// their free memory and what a share takes there.
	eligible []eligibleGPU
	gpus     []GPU
}

type eligibleGPU struct {
	key  deviceKey
	dev  resourceapi.Device
	free int64
	need int64
}

// diagnose says whether a could be served on node by memory, selectors and
// taints alone, and if not, why.
func (w *world) diagnose(ctx context.Context, node string, a alt, used map[deviceKey]int64) altDiag {
	d := altDiag{a: a}
	keys := w.nodeDevices(node)
	reason := func(code Code, format string, args ...any) {
		d.reason = &Reason{Code: code, Claim: a.claimName(), Request: a.request, Message: fmt.Sprintf(format, args...)}
	}
	if len(keys) == 0 {
		reason(NoGPUs, "the node publishes no %s GPUs", "gpufrac.dev")
		return d
	}
	var excluded, tainted []string
	var needs []int64
	for _, k := range keys {
		info := w.devices[k]
		capacity := capacityOf(info.dev)
		g := GPU{Device: k.device, MemoryBytes: capacity, FreeBytes: capacity - used[k],
			Model: stringAttr(info.dev, resourceslices.AttrProductName), Enforcement: stringAttr(info.dev, resourceslices.AttrMemoryEnforcement),
			ServerReserveBytes: serverReserveOf(info.dev)}
		if by := w.excludedBy(ctx, a, info); by != "" {
			g.ExcludedBy = by
			excluded = append(excluded, k.device+": "+by)
		} else if taints := untolerated(a, info.dev); len(taints) > 0 {
			g.ExcludedBy = "taint " + strings.Join(taints, ",")
			tainted = append(tainted, k.device+" ("+strings.Join(taints, ",")+")")
		} else {
			n, _ := need(a, info.dev)
			needs = append(needs, n)
			d.eligible = append(d.eligible, eligibleGPU{key: k, dev: info.dev, free: g.FreeBytes, need: n})
		}
		d.gpus = append(d.gpus, g)
	}
	if len(d.eligible) == 0 {
		if len(tainted) > 0 {
			reason(Tainted, "the GPUs the selectors allow carry taints the request does not tolerate: %s", strings.Join(tainted, "; "))
		} else {
			reason(SelectorExcludes, "no GPU here matches: %s", strings.Join(excluded, "; "))
		}
		return d
	}
	want := a.count
	if a.all {
		want = int64(len(d.eligible))
	}
	var fitting, total, largest, largestCap int64
	var largestDev string
	for _, e := range d.eligible {
		if e.free >= e.need && e.need <= capacityOf(e.dev) {
			fitting++
		}
		total += max(e.free, 0)
		if e.free > largest || largestDev == "" {
			largest, largestDev = e.free, e.key.device
		}
		largestCap = max(largestCap, capacityOf(e.dev))
	}
	if fitting >= want {
		d.fits = true
		return d
	}
	n := needs[0]
	per := "on one GPU"
	if want > 1 {
		per = fmt.Sprintf("on each of %d GPUs", want)
	}
	switch {
	case n > largestCap:
		reason(NotEnoughMemory, "the request takes %s guaranteed %s, more than any GPU here has (%s)", q(n), per, q(largestCap))
	case total >= n*want:
		reason(Fragmented, "%s free in total across %d GPUs, but at most %s on one (%s); a share needs %s %s and cannot span GPUs",
			q(total), len(d.eligible), q(largest), largestDev, q(n), per)
	default:
		reason(NotEnoughMemory, "the request needs %s free guaranteed memory %s; the largest free share here is %s (%s), %s free in all",
			q(n), per, q(max(largest, 0)), largestDev, q(total))
	}
	return d
}

func stringAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// q prints bytes the way Kubernetes prints memory.
func q(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

// serverReserveOf is the MPS server reserve a device's slice states, in
// bytes; 0 where none or where the figure is no GPU's (a hostile slice).
func serverReserveOf(d resourceapi.Device) int64 {
	if a, ok := d.Attributes[resourceslices.AttrMPSServerReserveMiB]; ok && a.IntValue != nil && *a.IntValue > 0 && *a.IntValue < 1<<32 {
		return *a.IntValue << 20
	}
	return 0
}
