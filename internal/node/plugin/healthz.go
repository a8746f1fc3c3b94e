// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
)

// healthzTimeout bounds each call of a health check: a plugin that cannot
// answer its own socket within it is wedged.
const healthzTimeout = 5 * time.Second

// Healthz checks what the kubelet depends on, the way the kubelet reaches
// it: the registration socket answers GetInfo, the DRA socket it names
// answers an empty NodePrepareResources, and the checkpoint on disk reads
// back. A failure means the plugin should be restarted (the chart's
// liveness probe).
func (p *Plugin) Healthz(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthzTimeout)
	defer cancel()
	regSock := filepath.Join(p.cfg.RegistrarDir, v1alpha1.DriverName+"-reg.sock")
	if p.cfg.RollingUpdateUID != "" {
		regSock = filepath.Join(p.cfg.RegistrarDir, kubeletplugin.RollingUpdateRegistrarSocketFile(p.cfg.RegistrarDir, v1alpha1.DriverName, p.cfg.RollingUpdateUID))
	}
	var endpoint string
	err := withConn(regSock, func(conn *grpc.ClientConn) error {
		info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		if err != nil {
			return err
		}
		endpoint = info.Endpoint
		return nil
	})
	if err != nil {
		return fmt.Errorf("registration socket %s: GetInfo: %w", regSock, err)
	}
	err = withConn(endpoint, func(conn *grpc.ClientConn) error {
		_, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{})
		return err
	})
	if err != nil {
		return fmt.Errorf("DRA socket %s: NodePrepareResources: %w", endpoint, err)
	}
	return p.checkpointHealthz()
}

// checkpointHealthz reads the checkpoint file back: a file that no longer
// decodes would be lost at the next restart. (A file of an earlier boot is
// fine: it stays until the first Prepare of this boot rewrites it.)
func (p *Plugin) checkpointHealthz() error {
	path := filepath.Join(p.cfg.PluginDataDir, CheckpointFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing prepared yet
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if _, err := checkpoint.Decode(raw); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return nil
}

func withConn(socket string, call func(*grpc.ClientConn) error) error {
	if _, err := os.Stat(socket); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return call(conn)
}
