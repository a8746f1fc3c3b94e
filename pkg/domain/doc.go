// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package domain is gpufrac's model of a node's GPUs and of what a share
// gets on them: the GPU and inventory values discovery produces, memory
// enforcement, compute modes, the MPS binding of a share, the device naming
// and memory grid of the ResourceSlices, the data a claim's status
// publishes, and the catalog of simulated GPU models.
//
// It is the leaf every audience shares (the kubelet plugin, the admission
// webhook, kubectl-gpufrac, the benchmarks) and imports only the standard
// library and k8s.io/apimachinery, so that a package depending on it links
// neither NVML (cgo) nor a Kubernetes client. Where the values come from is
// the adapters' business: internal/node/nvmldiscovery reads them from NVML,
// internal/sim/gpusim from go-nvml's simulated servers, and
// SimulatedInventory here builds the same inventory from the catalog alone
// (a test in gpusim holds the two equal).
package domain
