// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// A node with MIG instances beside a fractional GPU (issue 35): GPU 0
// serves fractions, GPU 1 is split into three MIG instances by its layout.
const (
	migNode   = "demo-mig"
	migLayout = "h100x1,a100x1:mig=3g.40gb+2g.20gb+1g.10gb"
)

// migDemo adds the MIG node, runs a pod on a whole 3g.40gb instance through
// the mig.gpufrac.dev class, and shows the node in kubectl gpufrac status.
func migDemo(ctx context.Context, o options, cp *harness.ControlPlane, root string) error {
	step("A node with MIG instances beside a fractional GPU (%s)", migLayout)
	if o.real {
		if _, err := cp.AddRealNode(ctx, harness.RealNodeOptions{Name: migNode, GPUs: migLayout, StubDriver: true}); err != nil {
			return err
		}
	} else if _, err := cp.AddNode(ctx, harness.NodeOptions{Name: migNode, GPUs: migLayout}); err != nil {
		return err
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "mig-3g40gb"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "mig.gpufrac.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["gpufrac.dev"].profile == "3g.40gb"`}}},
			}}},
		}}}}
	if _, err := cp.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ResourceClaimTemplate %s: %w", tmpl.Name, err)
	}
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, kindPod("mig-trainer", migNode, tmpl.Name, o.real), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod mig-trainer: %w", err)
	}
	if err := waitPodRunning(ctx, cp, "default", "mig-trainer", o.timeout); err != nil {
		return err
	}
	fmt.Println("    pod mig-trainer holds a whole 3g.40gb instance (its /dev/nvidia-caps devices in the CDI spec, no memory limit inside MIG)")
	status := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl-gpufrac"), "status", "--node="+migNode, "--kubeconfig="+cp.Kubeconfig)
	status.Stdout, status.Stderr = os.Stdout, os.Stderr
	if err := status.Run(); err != nil {
		return fmt.Errorf("kubectl gpufrac status --node=%s: %w", migNode, err)
	}
	return nil
}
