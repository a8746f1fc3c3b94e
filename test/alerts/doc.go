// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package alerts tests gpufrac's Prometheus alerts
// (deployments/prometheus/gpufrac-rules.yaml) with the real promtool
// (hack/prombin): the rule file is checked, each alert fires in the
// scenario written for it and stays silent in a healthy one, over series
// the plugin's and the controller's own registries exposed
// (test/promscenario), so renaming a metric in the code fails them.
package alerts
