// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// InstallMPSDouble makes root, as the node's processes see it (its
// private mount namespace: the chart's plugin data directory exists only
// there), a driver root with MPS: the MPS double at
// usr/bin/nvidia-cuda-mps-control (static), nvidia-smi, and the daemon
// script's shell (kubebuild.BuildMPSDouble). A test that gives the node
// another driver root (the GPU Operator's) installs it there.
func (n *RealNode) InstallMPSDouble(ctx context.Context, root string) error {
	tools, err := n.cp.mpsDouble(ctx)
	if err != nil {
		return err
	}
	if err := n.ns.do(func() error { return kubebuild.InstallDriverRoot(tools, root) }); err != nil {
		return fmt.Errorf("installing the MPS double into the driver root %s of node %s: %w", root, n.Name, err)
	}
	return nil
}

// InstallMPSDouble makes root, a host path every node sees alike, a driver
// root with MPS (see RealNode.InstallMPSDouble).
func (cp *ControlPlane) InstallMPSDouble(ctx context.Context, root string) error {
	tools, err := cp.mpsDouble(ctx)
	if err != nil {
		return err
	}
	if err := kubebuild.InstallDriverRoot(tools, root); err != nil {
		return fmt.Errorf("installing the MPS double into the driver root %s: %w", root, err)
	}
	return nil
}
