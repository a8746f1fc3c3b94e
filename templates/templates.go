// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package templates holds the manifests gpufrac's binaries render at run
// time, one source each, embedded so that a binary carries the version it
// was built with (NVIDIA's DRA driver keeps its MPS control daemon's
// template in a templates/ folder the same way). An operator may replace
// one at run time: the Helm chart's mps.template value reaches the kubelet
// plugin as --mps-template; test/helm holds the chart's defaults equal to
// these files.
package templates

import _ "embed"

// MPSControlDaemon is templates/mps-control-daemon.yaml: the Pod that runs
// one GPU's (or, with mpsServerScope node, one node's) MPS control daemon,
// rendered by internal/node/mps with text/template (missingkey=error) and
// pinned to the node.
//
//go:embed mps-control-daemon.yaml
var MPSControlDaemon string
