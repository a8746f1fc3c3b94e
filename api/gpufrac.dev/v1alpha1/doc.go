// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 is the opaque device configuration of the gpufrac.dev DRA
// driver: the FractionConfig that DeviceClasses and ResourceClaims carry in
// their opaque config. It owns decoding (strict), defaulting and validation,
// so the kubelet plugin, the admission webhook and `kubectl gpufrac validate`
// all judge a config with the same code.
package v1alpha1
