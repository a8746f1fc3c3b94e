// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The MPS side of the plugin's configuration: the daemons' command-line
// settings, the manager built from them, the server scope the node runs
// and the memory kept back for the server's context.

// MPSConfig is what the MPS daemons need from the command line.
type MPSConfig struct {
	// Namespace is the plugin's own namespace, where daemon Pods live.
	Namespace    string
	Image        string
	Template     string
	ReadyTimeout time.Duration
	// DefaultNamespaceLimits bind the MPS v3 shared server's default
	// namespace; zero fields take mps.DefaultSafetyLimits'.
	DefaultNamespaceLimits mps.NamespaceLimits
	// ServerReserveMiB is kept back from each GPU's published memory for
	// the MPS server's own context on nodes that run MPS daemons.
	ServerReserveMiB int64
	// ServerScope is domain.MPSServerScopeGPU (empty: the default) or
	// domain.MPSServerScopeNode: one MPS v3 node server over every
	// fraction GPU of the node, which admits claims whose MPS shares span
	// GPUs. A node without MPS v3 runs per-GPU daemons whatever it says.
	ServerScope string
}

// newMPSManager returns nil, and says why, where SMSharing cannot run.
func newMPSManager(ctx context.Context, cfg Config, inv *domain.Inventory, events *eventReporter, keepUnused func() string, serverGPUs func() []string) (*mps.Manager, error) {
	logger := klog.FromContext(ctx)
	switch {
	case inv.MPSVersion == domain.MPSVersionNone:
		logger.Info("MPS is off on this node (no nvidia-cuda-mps-control under the driver root, or MPS turned off)")
		return nil, nil
	case cfg.MPS.Image == "" || cfg.MPS.Namespace == "":
		return nil, nil
	}
	driverRoot := cfg.CDI.DriverRoot
	if driverRoot == "" {
		driverRoot = "/"
	}
	memory := map[string]int64{}
	for _, g := range inv.GPUs {
		memory[g.UUID] = int64(g.MemoryBytes >> 20)
	}
	if inv.MPSServerScope != domain.MPSServerScopeNode {
		serverGPUs = nil
	}
	m, err := mps.NewManager(mps.Config{
		Client: cfg.KubeClient, Namespace: cfg.MPS.Namespace, NodeName: cfg.NodeName, GPUMemoryMiB: memory,
		Template: cfg.MPS.Template, Image: cfg.MPS.Image, DriverRoot: driverRoot, Version: inv.MPSVersion, DriverVersion: inv.DriverVersion,
		ReadyTimeout: cfg.MPS.ReadyTimeout, DefaultNamespaceLimits: cfg.MPS.DefaultNamespaceLimits, Events: events, RecordDir: cfg.CDI.RecordDir, KeepUnused: keepUnused, NodeServerGPUs: serverGPUs,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring MPS daemons: %w", err)
	}
	return m, nil
}

// mpsServerScope is the scope the node runs: the node server only where
// its MPS is v3 (a legacy daemon has no allowed_devices list), none where
// it runs no MPS daemons.
func mpsServerScope(ctx context.Context, want, version string) string {
	switch {
	case version == domain.MPSVersionNone:
		return ""
	case want == domain.MPSServerScopeNode && version == domain.MPSVersionV3:
		return domain.MPSServerScopeNode
	case want == domain.MPSServerScopeNode:
		klog.FromContext(ctx).Info("--mps-server-scope=node needs MPS v3 (driver r615+); this node runs one MPS daemon per GPU, and claims whose MPS shares span GPUs are refused here",
			"mpsVersion", version)
	}
	return domain.MPSServerScopeGPU
}

// reserveForServer keeps reserveMiB of every GPU back for the MPS server's
// context on a node that runs MPS daemons (every fraction there is an MPS
// client, and the server's context is in no claim's limits): without it a
// GPU filled to its capacity leaves the last within-soft requester out of
// memory with no over-soft client to evict (docs/enforcement.md).
func reserveForServer(inv *domain.Inventory, reserveMiB int64) error {
	if reserveMiB < 0 {
		return fmt.Errorf("--mps-server-reserve-mib %d: must not be negative", reserveMiB)
	}
	if inv.MPSVersion == domain.MPSVersionNone || reserveMiB == 0 {
		return nil
	}
	reserve := uint64(reserveMiB) << 20
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if reserve >= g.MemoryBytes {
			return fmt.Errorf("--mps-server-reserve-mib %d: must be below the memory of GPU %s (%d MiB)", reserveMiB, g.UUID, g.MemoryBytes>>20)
		}
		g.ServerReserveBytes = reserve
	}
	return nil
}
