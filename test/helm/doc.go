// Package helm holds the tests of the Helm chart in deployments/helm/gpufrac:
// rendering and linting with the Helm SDK, every rendered object checked by
// a real kube-apiserver (test/harness), and the kubelet plugin run under the
// chart's RBAC and admission policy.
package helm
