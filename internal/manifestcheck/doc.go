// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package manifestcheck checks the gpufrac.dev configs in Kubernetes
// manifests before they reach a cluster: it is the engine of `kubectl
// gpufrac validate`.
//
// It reads YAML or JSON (several documents, or a List), finds the
// ResourceClaims, ResourceClaimTemplates and DeviceClasses of
// resource.k8s.io/v1, and judges every opaque config addressed to driver
// gpufrac.dev with the same code the admission webhook and the kubelet
// plugin use (package v1alpha1): strict decoding, Validate, and, where the
// claim states a memory request, ValidateAgainstRequest. Problems are
// reported with the field path inside the object, so a user can find the
// line to fix. Objects of other kinds are reported as ignored.
//
// What needs the cluster (the GPU's memory, DeviceClasses that are not in
// the input) is out of reach here; see Check for how classes in the input
// are used.
package manifestcheck
