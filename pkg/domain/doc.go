// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package domain is gpufrac's public model of a node's GPUs and of what a
// share gets on them, in the terms its ResourceSlices and claim statuses
// publish: the GPU, MIG instance and inventory values discovery produces;
// memory enforcement and what a node enforces, said plainly; the MPS
// versions, server scopes and compute modes a node offers; the device
// naming, device types and memory grid of the slices (what a slice's
// memory means); and the data a claim's status.devices entries carry.
//
// It is the one package of gpufrac another program may import: the
// kubectl plugin, a scheduler plugin or a controller that reads gpufrac's
// ResourceSlices and claim statuses, as well as gpufrac's own plugin,
// webhook and benchmarks. It imports only the standard library and
// k8s.io/apimachinery (test/deps pins that), so a program depending on it
// links neither NVML (cgo) nor a Kubernetes client.
//
// What only the node needs stays in internal/: the MPS path layout
// (internal/core/mpslayout), the plugin's flags (internal/node/plugin),
// the catalog of simulated GPU models (internal/sim/catalog). Where the
// values come from is the adapters' business: internal/node/nvmldiscovery
// reads them from NVML, internal/sim/gpusim from go-nvml's simulated
// servers.
package domain
