// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package deviceclass decides which DeviceClasses, and which requests of a
// claim, are gpufrac's: the one home of that question for the admission
// webhooks, packing and the manifest checker. Each predicate is named for
// what it means, and each caller uses the one its purpose needs:
//
//   - SelectsGpufrac: the class's selectors name gpufrac's driver, so its
//     requests are allocated gpufrac's devices. Packing (a fraction pod is
//     drawn towards shared GPUs) and the manifest checker (a request's
//     memory is bounded by gpufrac's largest GPU) use it: both are about
//     the devices a request will get.
//   - MayUseGpufrac: the class selects gpufrac's devices or carries a
//     gpufrac.dev config, which the allocator hands to gpufrac wherever it
//     allocates one of its devices. The admission webhook's strip of the
//     NVIDIA variables and its one-guarantee check use it: both protect a
//     container that could get a gpufrac device, so they err on the side
//     of counting a class.
//   - NamedAsShipped: the name alone, as gpufrac's shipped classes are
//     named; only for a class whose object is out of sight (a manifest
//     checked without its cluster).
//
// The selectors are CEL that only the scheduler evaluates against devices;
// a selector "names gpufrac's driver" when its text holds the quoted
// driver name, as in device.driver == "gpufrac.dev" or
// device.attributes["gpufrac.dev"], both of which only gpufrac's devices
// satisfy.
package deviceclass

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// quotedDriver is the driver's name as a CEL string literal.
const quotedDriver = `"` + v1alpha1.DriverName + `"`

// SelectsGpufrac reports whether one of the class's CEL selectors names
// gpufrac's driver (see the package comment).
func SelectsGpufrac(c *resourceapi.DeviceClass) bool {
	for _, s := range c.Spec.Selectors {
		if s.CEL != nil && strings.Contains(s.CEL.Expression, quotedDriver) {
			return true
		}
	}
	return false
}

// ConfiguresGpufrac reports whether the class carries an opaque config
// addressed to gpufrac's driver.
func ConfiguresGpufrac(c *resourceapi.DeviceClass) bool {
	for _, cfg := range c.Spec.Config {
		if cfg.Opaque != nil && cfg.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	return false
}

// MayUseGpufrac reports whether a request of the class could be given
// gpufrac's devices or config: it selects them or configures the driver.
func MayUseGpufrac(c *resourceapi.DeviceClass) bool {
	return SelectsGpufrac(c) || ConfiguresGpufrac(c)
}

// NamedAsShipped reports whether name is one gpufrac's shipped classes
// have: the driver's name, or a mode or kind before it
// (sm-sharing.gpufrac.dev, mig.gpufrac.dev, ...). It says nothing of what
// a class of that name selects: use it only where the class is not known.
func NamedAsShipped(name string) bool {
	return name == v1alpha1.DriverName || strings.HasSuffix(name, "."+v1alpha1.DriverName)
}

// Names decides pred once for each of classes and answers by class name;
// a name not among classes is false.
func Names(classes []*resourceapi.DeviceClass, pred func(*resourceapi.DeviceClass) bool) func(name string) bool {
	ours := make(map[string]bool, len(classes))
	for _, c := range classes {
		ours[c.Name] = pred(c)
	}
	return func(name string) bool { return ours[name] }
}
