// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package harness runs a real, local Kubernetes control plane for gpufrac's
// integration tests and for `make demo`: etcd, kube-apiserver (client
// certificates, service-account keys and RBAC made on the fly),
// kube-scheduler and kube-controller-manager, all on 127.0.0.1, built from
// their published modules by package kubebuild. Nodes are simulated: a Ready
// Node object, gpufrac-kubelet-plugin with --simulate-gpus, and a kubelet
// stand-in (package kubeletstandin) that prepares claims through the
// plugin's real DRA socket. Real nodes (realnode.go) run the upstream
// kubelet, containerd and runc; with Options.Workloads and
// RealNodeOptions.ChartPlugin they run the Helm chart's pods instead of a
// plugin process (workloads.go, chartimage.go, helm.go).
//
// Everything a control plane starts is a child process stopped by its own
// PID on Close, and killed by the kernel if the harness dies first; its files
// live in one directory per run, removed on Close (or by the next run, when a
// killed run could not). Component logs go to files whose tails LogTails
// prints.
package harness
