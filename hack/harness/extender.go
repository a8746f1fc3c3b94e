// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpufrac/gpufrac/internal/controller"
)

// StartExtender runs gpufrac-controller with its scheduler extender
// (--extender-address=address) and neither the packing webhook nor the
// node labels, so that the extender is the only packing mechanism. The
// scheduler must already name http://address/scheduler as an extender
// (SchedulerConfig); until the controller serves, an ignorable extender's
// errors only cost packing. It returns once the controller's informers
// have synced and it serves.
func (cp *ControlPlane) StartExtender(ctx context.Context, address string) (_ *Controller, finalErr error) {
	dir, _, err := loopbackCertDir(cp.Dir, "extender-")
	if err != nil {
		return nil, err
	}
	client, err := cp.controllerClient()
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan string, 1)
	// No webhook configuration is registered: Close finds none to delete.
	c := &Controller{cancel: cancel, done: make(chan error, 1), config: "gpufrac-extender-none", cp: cp}
	go func() {
		c.done <- controller.Run(runCtx, controller.Config{
			Client: client, WebhookAddress: "127.0.0.1:0", CertDir: dir, ExtenderAddress: address,
			Ready: func(addr string) { ready <- addr },
		})
	}()
	defer func() {
		if finalErr != nil {
			_ = c.Close()
		}
	}()
	select {
	case <-ready:
		return c, nil
	case err := <-c.done:
		c.done <- err
		return nil, fmt.Errorf("gpufrac-controller stopped: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// controllerClient is a client with gpufrac-controller's own limits
// (controller.DefaultKubeAPIQPS and Burst, what its flags default to and the
// chart leaves alone), not the harness's lifted ones: the packing labels'
// lag under a burst is part of what the benchmarks measure.
func (cp *ControlPlane) controllerClient() (kubernetes.Interface, error) {
	config := rest.CopyConfig(cp.RestConfig)
	config.QPS, config.Burst = controller.DefaultKubeAPIQPS, controller.DefaultKubeAPIBurst
	config.UserAgent = "gpufrac-controller"
	controller.UseProtobuf(config)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("gpufrac-controller's client: %w", err)
	}
	return client, nil
}
