// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package deviceclass

import (
	"iter"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// Request is one request of a claim as a config's `requests` entries name
// it: an exact request by its own name, a firstAvailable subrequest as
// "<request>/<subrequest>".
type Request struct {
	Name   string
	Parent string // the request's name, the subrequest's request's
	// Index is the request's position in spec.devices.requests, Sub the
	// subrequest's in its firstAvailable (-1 for an exact request).
	Index, Sub int
	Class      string
	// AdminAccess: a monitoring request (exact requests only), which holds
	// no guarantee.
	AdminAccess bool
	Capacity    *resourceapi.CapacityRequirements
}

// Requests yields each exact request and each firstAvailable subrequest
// of spec, in the order of the spec.
func Requests(spec *resourceapi.ResourceClaimSpec) iter.Seq[Request] {
	return func(yield func(Request) bool) {
		if spec == nil {
			return
		}
		for i, r := range spec.Devices.Requests {
			if e := r.Exactly; e != nil {
				if !yield(Request{Name: r.Name, Parent: r.Name, Index: i, Sub: -1, Class: e.DeviceClassName,
					AdminAccess: ptr.Deref(e.AdminAccess, false), Capacity: e.Capacity}) {
					return
				}
			}
			for j, s := range r.FirstAvailable {
				if !yield(Request{Name: r.Name + "/" + s.Name, Parent: r.Name, Index: i, Sub: j, Class: s.DeviceClassName, Capacity: s.Capacity}) {
					return
				}
			}
		}
	}
}

// GpufracRequests yields the requests of spec whose class ours accepts
// (Names over MayUseGpufrac or SelectsGpufrac, as the caller's purpose
// needs): the one walk of a claim for gpufrac's requests.
func GpufracRequests(spec *resourceapi.ResourceClaimSpec, ours func(class string) bool) iter.Seq[Request] {
	return func(yield func(Request) bool) {
		for r := range Requests(spec) {
			if ours(r.Class) && !yield(r) {
				return
			}
		}
	}
}

// CarriesGpufracConfig reports whether the claim spec holds an opaque
// config addressed to gpufrac's driver.
func CarriesGpufracConfig(spec *resourceapi.ResourceClaimSpec) bool {
	if spec == nil {
		return false
	}
	for _, c := range spec.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	return false
}
