// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package helm holds the tests of the Helm chart in deployments/helm/gpufrac:
// rendering and linting with the Helm SDK, every rendered object checked by
// a real kube-apiserver (hack/harness), the kubelet plugin run under the
// chart's RBAC and admission policy, and, as root, the release for real
// (TestHelmReleaseOnTheRealNode): installed, upgraded, rolled back and
// uninstalled with the Helm SDK (internal/helmrun) on a real node, from an
// image built without Docker.
package helm
