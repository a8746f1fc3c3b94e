// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nvmldiscovery reads a node's GPUs and what the node can enforce
// about their memory from NVML, into pkg/domain's Inventory. It is the only
// package that talks to NVML for discovery (cgo, through go-nvml); the
// simulated GPUs are the other adapter (internal/sim/gpusim, and
// catalog.Inventory without NVML at all), and everything downstream
// (the ResourceSlice model, claim planning) works on the plain values.
package nvmldiscovery
