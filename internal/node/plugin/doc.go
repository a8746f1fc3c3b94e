// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package plugin is gpufrac's kubelet plugin: it discovers the node's
// GPUs, registers with the kubelet through
// k8s.io/dynamic-resource-allocation/kubeletplugin, publishes the node's
// ResourceSlices and answers the kubelet's DRA calls. It wires the other
// packages together; the decisions live in them (inventory for discovery,
// resourceslices for the resource model).
package plugin
