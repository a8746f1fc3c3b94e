// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package e2e holds the end-to-end tests: the harness's control plane
// (hack/harness) plus one real node, on which the upstream kubelet calls
// gpufrac-kubelet-plugin (simulated GPUs) over the real DRA socket,
// containerd applies the plugin's CDI specs, runc runs gpufrac-cdi-hook, and
// a probe program in a real container prints what it sees.
//
// They need root, Linux and writable cgroups; elsewhere every test skips
// and says why. The node's binaries (hack/nodebuild) are built once per
// machine; `make e2e` builds them first, with progress on the terminal.
package e2e
