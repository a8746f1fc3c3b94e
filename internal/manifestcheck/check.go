// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package manifestcheck

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/deviceclass"
)

// memoryCapacity is the capacity a gpufrac.dev device publishes its memory
// under, and so the one a claim requests.
const memoryCapacity resourceapi.QualifiedName = "memory"

func opaqueParams(c resourceapi.DeviceConfiguration) ([]byte, bool) {
	if c.Opaque == nil || c.Opaque.Driver != v1alpha1.DriverName {
		return nil, false // another driver's config is not ours to judge
	}
	return c.Opaque.Parameters.Raw, true
}

func checkDeviceClass(dc *resourceapi.DeviceClass, b bound) field.ErrorList {
	var errs field.ErrorList
	for i, c := range dc.Spec.Config {
		raw, ours := opaqueParams(c.DeviceConfiguration)
		if !ours {
			continue
		}
		p := field.NewPath("spec", "config").Index(i).Child("opaque", "parameters")
		cfg, decodeErrs := v1alpha1.Decode(raw, p)
		errs = append(errs, decodeErrs...)
		errs = append(errs, v1alpha1.Validate(cfg, p)...)
		errs = append(errs, b.checkLimit(cfg, p)...)
	}
	return errs
}

// bound is the most memory one share may have (v1alpha1.LargestGPU).
type bound struct {
	largest resource.Quantity
	source  string
}

func (b bound) check(q resource.Quantity, p *field.Path) *field.Error {
	if q.Cmp(b.largest) > 0 {
		return field.Invalid(p, q.String(), fmt.Sprintf("must be at most %s, the largest GPU %s", b.largest.String(), b.source))
	}
	return nil
}

func (b bound) checkLimit(cfg *v1alpha1.FractionConfig, p *field.Path) field.ErrorList {
	if cfg == nil || cfg.MemoryLimit == nil || cfg.MemoryLimit.Sign() <= 0 {
		return nil // Validate reports a limit that is not positive
	}
	if err := b.check(*cfg.MemoryLimit, p.Child("memoryLimit")); err != nil {
		return field.ErrorList{err}
	}
	return nil
}

// checkRequestMemory bounds the memory capacity a gpufrac request asks for:
// above zero (a share of nothing is no share) and at most the largest GPU.
func (b bound) checkRequestMemory(r request) *field.Error {
	if r.memory == nil {
		return nil
	}
	if r.memory.Sign() <= 0 {
		return field.Invalid(r.path, r.memory.String(), "must be greater than zero")
	}
	return b.check(*r.memory, r.path)
}

// classConfigs is what the inputs say of DeviceClasses: which of them are
// there, which select gpufrac's devices, and the gpufrac.dev configs of
// each, in their order (the order Merge takes them).
type classConfigs struct {
	seen, selects map[string]bool
	configs       map[string][]*v1alpha1.FractionConfig
}

func newClassConfigs() classConfigs {
	return classConfigs{seen: map[string]bool{}, selects: map[string]bool{}, configs: map[string][]*v1alpha1.FractionConfig{}}
}

// ours reports whether a request of class is a gpufrac.dev one: a class
// among the inputs when it selects gpufrac's devices
// (deviceclass.SelectsGpufrac), whatever its name or config; a class out
// of sight when it is named as the shipped classes are
// (deviceclass.NamedAsShipped: gpufrac.dev, <mode>.gpufrac.dev).
func (cc classConfigs) ours(class string) bool {
	if cc.seen[class] {
		return cc.selects[class]
	}
	return deviceclass.NamedAsShipped(class)
}

func (cc classConfigs) add(dc *resourceapi.DeviceClass) {
	cc.seen[dc.Name] = true
	cc.selects[dc.Name] = cc.selects[dc.Name] || deviceclass.SelectsGpufrac(dc)
	for _, c := range dc.Spec.Config {
		if raw, ours := opaqueParams(c.DeviceConfiguration); ours {
			// A class config with errors still says what mode it meant;
			// its own errors are reported on the class.
			if cfg, _ := v1alpha1.Decode(raw, nil); cfg != nil {
				cc.configs[dc.Name] = append(cc.configs[dc.Name], cfg)
			}
		}
	}
}

// mode is the compute mode a class's configs set, "" when they set none,
// the class is unknown, or its mode is invalid (reported on the class).
func (cc classConfigs) mode(class string) v1alpha1.ComputeMode {
	m := v1alpha1.Merge(cc.configs[class]...).ComputeMode
	if !slices.Contains(v1alpha1.SupportedComputeModes, m) {
		return ""
	}
	return m
}

// request is one (sub)request of a claim, as config `requests` entries
// name it: "gpu" for an exact request, "gpu/small" for a subrequest of
// firstAvailable.
type request struct {
	name, parent string
	class        string
	admin        bool               // adminAccess: a monitoring request, no limits
	memory       *resource.Quantity // nil: the claim states none
	path         *field.Path        // of the memory capacity request
}

func requestsOf(spec *resourceapi.ResourceClaimSpec, root *field.Path) []request {
	var out []request
	reqs := root.Child("devices", "requests")
	for r := range deviceclass.Requests(spec) {
		p := reqs.Index(r.Index).Child("exactly")
		if r.Sub >= 0 {
			p = reqs.Index(r.Index).Child("firstAvailable").Index(r.Sub)
		}
		out = append(out, request{name: r.Name, parent: r.Parent, class: r.Class, admin: r.AdminAccess,
			memory: memoryOf(r.Capacity), path: p.Child("capacity", "requests").Key(string(memoryCapacity))})
	}
	return out
}

// memoryOf is the memory a request's capacity asks, nil when it states none.
func memoryOf(c *resourceapi.CapacityRequirements) *resource.Quantity {
	if c == nil {
		return nil
	}
	if q, ok := c.Requests[memoryCapacity]; ok {
		return &q
	}
	return nil
}

// covered returns the requests a config applies to: all of them when the
// config names none; a name covers the request and, for firstAvailable,
// every subrequest of it; "req/sub" covers that subrequest only.
func covered(all []request, names []string) []request {
	if len(names) == 0 {
		return all
	}
	var out []request
	for _, r := range all {
		if slices.Contains(names, r.name) || slices.Contains(names, r.parent) {
			out = append(out, r)
		}
	}
	return out
}

func checkClaimSpec(spec *resourceapi.ResourceClaimSpec, root *field.Path, classes classConfigs, b bound) field.ErrorList {
	requests := requestsOf(spec, root)
	var errs field.ErrorList
	ourRequests := map[string]bool{}
	for _, r := range requests {
		if classes.ours(r.class) {
			ourRequests[r.name] = true
		}
	}
	for i, c := range spec.Devices.Config {
		raw, ours := opaqueParams(c.DeviceConfiguration)
		if !ours {
			continue
		}
		p := root.Child("devices", "config").Index(i).Child("opaque", "parameters")
		cfg, decodeErrs := v1alpha1.Decode(raw, p)
		errs = append(errs, decodeErrs...)
		if cfg == nil {
			continue
		}
		reqs := covered(requests, c.Requests)
		for _, r := range reqs {
			ourRequests[r.name] = true
			if r.admin {
				// As the node refuses it (internal/core/plan): a monitor
				// gets the GPU without limits, MPS or a compute mode.
				errs = append(errs, field.Forbidden(p, fmt.Sprintf(
					"applies to request %s, which asks for adminAccess (a monitoring pod): it gets the GPU without memory limits, MPS or a compute mode, so a FractionConfig cannot apply to it; list only the fraction requests in this config's requests", r.name)))
			}
		}
		errs = append(errs, validateUnderClasses(cfg, reqs, classes, p)...)
		errs = append(errs, b.checkLimit(cfg, p)...)
		for _, r := range reqs {
			if r.memory != nil {
				// Every alternative of firstAvailable may be the one
				// allocated, so the limit must suit each.
				errs = append(errs, v1alpha1.ValidateAgainstRequest(cfg, *r.memory, nil, p)...)
			} else if cfg.MemoryLimit != nil && cfg.MemoryLimit.Sign() > 0 && classes.ours(r.class) {
				// With no memory request the request is the whole GPU
				// (the slice's requestPolicy default), above any limit
				// below it: the claim could never be prepared.
				errs = append(errs, field.Invalid(p.Child("memoryLimit"), cfg.MemoryLimit.String(),
					fmt.Sprintf("needs a memory request on request %s (%s): without one the request is the whole GPU, and a limit cannot be below the request; set the request, or drop memoryLimit to have the whole GPU",
						r.name, r.path)))
			}
		}
	}
	for _, r := range requests {
		if ourRequests[r.name] {
			if err := b.checkRequestMemory(r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return dedupe(errs)
}

// validateUnderClasses validates a claim config the way the driver will
// see it: when the config leaves computeMode unset, the mode comes from the
// DeviceClass config of the request it applies to. Only the mode is
// borrowed, so every problem reported is one in the claim's own config.
func validateUnderClasses(cfg *v1alpha1.FractionConfig, reqs []request, classes classConfigs, p *field.Path) field.ErrorList {
	if cfg.ComputeMode != "" || len(reqs) == 0 {
		return v1alpha1.Validate(cfg, p)
	}
	var modes []v1alpha1.ComputeMode
	for _, r := range reqs {
		if m := classes.mode(r.class); !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	var errs field.ErrorList
	for _, m := range modes {
		layer := cfg.DeepCopy()
		layer.ComputeMode = m
		errs = append(errs, v1alpha1.Validate(layer, p)...)
	}
	return errs
}

// dedupe drops repeated problems, which arise when a config applies to
// several requests that judge it alike.
func dedupe(errs field.ErrorList) field.ErrorList {
	seen := map[string]bool{}
	out := errs[:0]
	for _, e := range errs {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			out = append(out, e)
		}
	}
	return out
}
