// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package deviceclasstest builds the kinds of DeviceClass the class rules
// of internal/deviceclass tell apart, for the tests of the rules and of
// their callers.
package deviceclasstest

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Class is a DeviceClass named name, with one CEL selector when selector is
// not empty and a gpufrac.dev FractionConfig when config is true.
func Class(name, selector string, config bool) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	if selector != "" {
		c.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	if config {
		c.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpufrac.dev", Parameters: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","computeMode":"SMSharing"}`)}}}}}
	}
	return c
}
