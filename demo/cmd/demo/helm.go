// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/hack/harness"
)

const (
	helmRelease   = "gpufrac"
	helmNamespace = "gpufrac-system"
	// helmVersion is the version string of the demo's image build.
	helmVersion = "0.1.0-demo"
)

// helmDemo is -helm: what a user's `helm install` does, on one real node.
// The chart's image is built from this checkout without Docker and
// imported into the node's containerd; the Helm SDK installs the chart;
// the plugin runs as the chart's DaemonSet pod, the controller as its
// Deployment. It prints the release's objects and pods, then uninstalls
// (after Ctrl-C with -wait).
func helmDemo(ctx context.Context, o options, cp *harness.ControlPlane, kubectlBin string) int {
	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Run()
	}
	step("Starting a real node (kubelet, containerd, runc) labelled nvidia.com/gpu.present=true, with no plugin: the chart brings it")
	n, err := cp.AddRealNode(ctx, harness.RealNodeOptions{Name: "demo-helm-1", GPUs: o.gpus, ChartPlugin: true,
		Labels: map[string]string{"nvidia.com/gpu.present": "true"}})
	if err != nil {
		return fail(err)
	}
	step("Building the chart's image without Docker (deployments/container/Dockerfile's paths, this host's glibc) into the node's containerd")
	ref, size, err := cp.LoadChartImage(ctx, n, helmVersion)
	if err != nil {
		return fail(err)
	}
	fmt.Printf("    %s: %d MiB, imported; the release's pods never pull (image.pullPolicy=Never)\n", ref, size>>20)

	h, err := cp.NewHelm(ctx, helmNamespace)
	if err != nil {
		return fail(err)
	}
	values, err := cp.ChartValues(n, o.gpus, helmVersion)
	if err != nil {
		return fail(err)
	}
	step("helm install %s deployments/helm/gpufrac -n %s --create-namespace --wait (the Helm SDK)", helmRelease, helmNamespace)
	fmt.Printf("    values: %v\n", values)
	start := time.Now()
	rel, err := h.Install(ctx, helmRelease, values)
	if err != nil {
		return fail(err)
	}
	fmt.Printf("    release %s revision %d %s in %s\n", rel.Name, rel.Revision, rel.Status, time.Since(start).Round(100*time.Millisecond))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		return err == nil && len(list.Items) > 0, nil
	})
	if err != nil {
		return fail(fmt.Errorf("the plugin pod published no ResourceSlice: %w", err))
	}

	step("The release's pods and workloads")
	_ = kubectl("get", "daemonsets,deployments,services,pods", "-n", helmNamespace, "-o", "wide")
	step("The release's cluster objects")
	_ = kubectl("get", "deviceclasses,mutatingwebhookconfigurations,validatingwebhookconfigurations,validatingadmissionpolicies,clusterroles",
		"-l", "app.kubernetes.io/instance="+helmRelease)
	step("ResourceSlices the plugin pod published")
	_ = kubectl("get", "resourceslices", "-o", "wide")

	if o.wait {
		step("The release keeps running; press Ctrl-C to uninstall it and stop the cluster")
		fmt.Printf("    export KUBECONFIG=%s\n    %s get pods -n %s -o wide\n", cp.Kubeconfig, kubectlBin, helmNamespace)
		<-ctx.Done()
	}
	step("helm uninstall %s -n %s --wait", helmRelease, helmNamespace)
	if err := h.Uninstall(context.WithoutCancel(ctx), helmRelease); err != nil {
		return fail(err)
	}
	return 0
}
