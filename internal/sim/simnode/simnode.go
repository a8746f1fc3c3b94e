// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package simnode turns the kubelet plugin's configuration into that of a
// simulated node (--simulate-gpus): NVML answers from a gpusim server, the
// simulated driver is installed where gpufrac-cdi-hook looks for NVML,
// and the hook, the usage counters and GPU health read and write files in
// the plugin's data directory instead of touching a GPU. Everything else
// (discovery, MPS, preparation) runs as on a real node, so the test tiers
// and the demo exercise the real code paths.
package simnode

import (
	"path/filepath"

	"github.com/gpufrac/gpufrac/internal/node/mps/launcher"
	"github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// Paths say where a simulated node's files go.
type Paths struct {
	// DriverRoot is the node's driver root (the plugin's --driver-root).
	// "/", the host's own root, is replaced by DriverRootIn(DataDir): the
	// simulated driver never goes into the host's library directories.
	DriverRoot string
	// DataDir is the plugin's data directory, where the hook's record,
	// the simulated usage and the simulated health files live.
	DataDir string
}

// libDir is where the simulated driver goes under the driver root, as in
// the GPU Operator's driver container.
const libDir = "usr/lib64"

// DriverRootIn is the driver root of a simulated node whose --driver-root
// is the host's root: a folder of its own in the data directory.
func DriverRootIn(dataDir string) string {
	return filepath.Join(dataDir, "simulated-driver-root")
}

// Configure points cfg at node: its NVML, its discovery options, its
// simulated driver (installed under the driver root, whose path it
// returns), device nodes, hook arguments and health file. cfg's CDI
// driver root becomes the one the driver was installed under.
func Configure(cfg *plugin.Config, node *gpusim.Node, p Paths) (string, error) {
	root := p.DriverRoot
	if root == "/" {
		root = DriverRootIn(p.DataDir)
	}
	cfg.CDI.DriverRoot = root
	lib, err := gpusim.InstallDriver(root, libDir, node.Driver)
	if err != nil {
		return "", err
	}
	cfg.NVML = node.NVML
	cfg.InventoryOptions = node.InventoryOptions
	cfg.InventoryOptions.LookPath = lookPathInRoot(node.InventoryOptions.LookPath, root)
	cfg.CDI.DeviceNode = gpusim.DeviceNode
	cfg.CDI.MIGCaps = gpusim.MIGCaps(len(node.NVML.Devices))
	// The hook of a simulated node records the limits it would set
	// instead of calling NVML; the simulated NVML answers from the record.
	record := filepath.Join(p.DataDir, gpusim.RecordFile)
	cfg.CDI.HookArgs = []string{"--simulate-record=" + record}
	gpusim.AnswerRecordedLimits(node.NVML, record)
	gpusim.AnswerSimulatedUsage(node.NVML, filepath.Join(p.DataDir, gpusim.UsageFile))
	// Simulated GPUs fail when this file says so.
	cfg.Health.SimulatedFile = filepath.Join(p.DataDir, gpusim.HealthFile)
	return lib, nil
}

// lookPathInRoot finds a binary only where both the simulated node has MPS
// (simulated) and the driver root holds it, as on a real node: the test
// tiers install the MPS double there.
func lookPathInRoot(simulated func(string) (string, error), root string) func(string) (string, error) {
	return func(file string) (string, error) {
		if _, err := simulated(file); err != nil {
			return "", err
		}
		return launcher.FindInRoot(root, file)
	}
}
