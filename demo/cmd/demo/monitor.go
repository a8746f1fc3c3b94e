// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// applyMonitor applies demo/monitor.yaml (a namespace labelled for DRA's
// adminAccess and a monitoring claim template) and its pod, and waits until
// the pod runs, so that `kubectl gpufrac status` shows it beside the
// fractions. On real nodes the pod runs the node image's probe, as the
// other demo pods do.
func applyMonitor(realNode bool, cluster, demoDir string, kubectl func(args ...string) *exec.Cmd) error {
	step("A monitoring pod with an adminAccess claim (demo/monitor.yaml): sees GPU 0 of demo-node-1, takes no share of it")
	pod := filepath.Join(demoDir, "monitor-pod.yaml")
	if realNode {
		dir := filepath.Join(cluster, "monitor")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		file, err := realNodePods(dir, pod)
		if err != nil {
			return err
		}
		pod = file
	}
	// The API server checks the namespace's admin-access label from its
	// cache, which may not hold a namespace created a moment ago: apply
	// again until the template is accepted.
	var err error
	for range 20 {
		if err = kubectl("apply", "-f", filepath.Join(demoDir, "monitor.yaml")).Run(); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return fmt.Errorf("kubectl apply of demo/monitor.yaml: %w", err)
	}
	// The API server admits a pod only once its namespace has its default
	// ServiceAccount, which the controller manager creates.
	if err := kubectl("wait", "--namespace=gpufrac-monitoring", "--for=create", "serviceaccount/default", "--timeout=60s").Run(); err != nil {
		return fmt.Errorf("the monitoring namespace has no default ServiceAccount: %w", err)
	}
	if err := kubectl("apply", "-f", pod).Run(); err != nil {
		return fmt.Errorf("kubectl apply of the monitoring pod: %w", err)
	}
	if err := kubectl("wait", "--namespace=gpufrac-monitoring", "--for=condition=Ready", "pod/dcgm-exporter", "--timeout=120s").Run(); err != nil {
		return fmt.Errorf("the monitoring pod did not become Ready: %w", err)
	}
	return nil
}
