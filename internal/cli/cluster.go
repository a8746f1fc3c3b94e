// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// The commands that read a cluster (status, why) reach it the way kubectl
// does: through k8s.io/cli-runtime's ConfigFlags, registered once on the
// root as persistent flags, as kubectl registers them. So --kubeconfig,
// --context, --namespace/-n, --cluster, --user, --server, --token, --as and
// the rest mean what they mean to kubectl, KUBECONFIG is honoured, and
// `kubectl gpufrac --context prod why POD` works as well as
// `kubectl gpufrac why POD --context prod`.

// clientFunc makes the client a command talks to the cluster with; tests
// pass one that returns a fake clientset.
type clientFunc func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error)

// kubeconfigClient builds a clientset from kubectl's flags.
func kubeconfigClient(getter genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-gpufrac"
	return kubernetes.NewForConfig(cfg)
}

// namespaceOf is the namespace kubectl would use: --namespace, else the
// context's, else "default".
func namespaceOf(flags *genericclioptions.ConfigFlags) string {
	if flags.Namespace != nil && *flags.Namespace != "" {
		return *flags.Namespace
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// checkOutput accepts the output formats of the commands that print a
// report. The reports are gpufrac's own structures, not Kubernetes
// objects, so cli-runtime's PrintFlags (whose printers take a
// runtime.Object) do not apply; -o json is the machine-readable form.
func checkOutput(output string) error {
	if output != "" && output != "json" {
		return fmt.Errorf("--output %q: the formats are json, or none for the table", output)
	}
	return nil
}
