// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletstandin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// pluginClient is the stand-in's connection to one registered DRA plugin.
type pluginClient struct {
	driver   string
	endpoint string
	conn     *grpc.ClientConn
	dra      drapb.DRAPluginClient
}

// registerPlugin does what the kubelet's plugin watcher and DRA registration
// handler do: find <registrar dir>/<driver>-reg.sock, ask the plugin for its
// info, check it, connect to the DRA endpoint it names, and tell the plugin
// the outcome.
func registerPlugin(ctx context.Context, registrarDir, driver string, timeout time.Duration) (*pluginClient, error) {
	logger := klog.FromContext(ctx)
	sock := filepath.Join(registrarDir, driver+"-reg.sock")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var (
		info    *registerapi.PluginInfo
		lastErr error
	)
	for info == nil {
		if _, err := os.Stat(sock); err != nil {
			lastErr = fmt.Errorf("registration socket: %w", err)
		} else {
			info, lastErr = getInfo(ctx, sock)
		}
		if info != nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("registering the DRA plugin %s through %s: %w (last error: %v)", driver, sock, context.Cause(ctx), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}

	regConn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", sock, err)
	}
	defer func() { _ = regConn.Close() }()
	reg := registerapi.NewRegistrationClient(regConn)

	p, verr := validateInfo(info, driver)
	if verr == nil {
		p.conn, verr = grpc.NewClient("unix:"+p.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if verr == nil {
			p.dra = drapb.NewDRAPluginClient(p.conn)
		}
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: verr == nil}
	if verr != nil {
		status.Error = verr.Error()
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, status); err != nil {
		if p != nil && p.conn != nil {
			_ = p.conn.Close()
		}
		return nil, errors.Join(verr, fmt.Errorf("NotifyRegistrationStatus: %w", err))
	}
	if verr != nil {
		return nil, verr
	}
	logger.V(2).Info("Registered DRA plugin", "driver", driver, "endpoint", p.endpoint, "versions", info.SupportedVersions)
	return p, nil
}

func getInfo(ctx context.Context, sock string) (*registerapi.PluginInfo, error) {
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", sock, err)
	}
	defer func() { _ = conn.Close() }()
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(callCtx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo: %w", err)
	}
	return info, nil
}

// validateInfo applies the kubelet's checks to GetInfo's answer.
func validateInfo(info *registerapi.PluginInfo, driver string) (*pluginClient, error) {
	if info.Type != registerapi.DRAPlugin {
		return nil, fmt.Errorf("plugin type %q, want %q", info.Type, registerapi.DRAPlugin)
	}
	if info.Name != driver {
		return nil, fmt.Errorf("plugin name %q, want %q", info.Name, driver)
	}
	if info.Endpoint == "" {
		return nil, errors.New("the plugin named no DRA endpoint")
	}
	if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		return nil, fmt.Errorf("plugin supports %v, the stand-in speaks %s", info.SupportedVersions, drapb.DRAPluginService)
	}
	return &pluginClient{driver: driver, endpoint: info.Endpoint}, nil
}

// callTimeout bounds one gRPC call, as the kubelet does.
const callTimeout = 45 * time.Second

func (p *pluginClient) prepare(ctx context.Context, claims []*drapb.Claim) (*drapb.NodePrepareResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := p.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources: %w", err)
	}
	return resp, nil
}

func (p *pluginClient) unprepare(ctx context.Context, claims []*drapb.Claim) (*drapb.NodeUnprepareResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := p.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		return nil, fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	return resp, nil
}

func (p *pluginClient) close() {
	if p != nil && p.conn != nil {
		_ = p.conn.Close()
	}
}

// Plugin is a registered DRA plugin's gRPC connection, for callers that
// drive NodePrepareResources themselves (a soak test) instead of through
// pods.
type Plugin struct{ c *pluginClient }

// Dial registers the plugin of driver through registrarDir as the kubelet
// does and connects to its DRA socket.
func Dial(ctx context.Context, registrarDir, driver string, timeout time.Duration) (*Plugin, error) {
	c, err := registerPlugin(ctx, registrarDir, driver, timeout)
	if err != nil {
		return nil, err
	}
	return &Plugin{c: c}, nil
}

// Prepare calls NodePrepareResources.
func (p *Plugin) Prepare(ctx context.Context, claims []*drapb.Claim) (*drapb.NodePrepareResourcesResponse, error) {
	return p.c.prepare(ctx, claims)
}

// Unprepare calls NodeUnprepareResources.
func (p *Plugin) Unprepare(ctx context.Context, claims []*drapb.Claim) (*drapb.NodeUnprepareResourcesResponse, error) {
	return p.c.unprepare(ctx, claims)
}

// Close closes the connection.
func (p *Plugin) Close() { p.c.close() }
