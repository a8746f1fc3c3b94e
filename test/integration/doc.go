// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package integration holds gpufrac's integration tests: the kubelet plugin
// against a real etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager (package harness), driven by a kubelet stand-in.
// They run in `make test`; the first run on a machine builds the upstream
// binaries (see package kubebuild).
package integration
