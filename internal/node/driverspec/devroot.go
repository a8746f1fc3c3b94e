// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package driverspec

import (
	"os"
	"path/filepath"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
)

// DevRoot is the host root the driver's device nodes are under when the
// operator names none: the driver root where it has a /dev folder (the
// GPU Operator's driver container), else the host's root. NVIDIA's DRA
// driver decides the same way (cmd/gpu-kubelet-plugin root.go
// getDevRoot). lookupRoot is where this process sees root.
func DevRoot(root, lookupRoot string) string {
	if lookupRoot == "" {
		lookupRoot = root
	}
	if fi, err := os.Stat(filepath.Join(lookupRoot, "dev")); err == nil && fi.IsDir() {
		return root
	}
	return "/"
}

// DeviceNodeUnder reads device nodes under a dev root: a spec path such
// as /dev/nvidia0 is read at lookupDevRoot/dev/nvidia0 and, where the dev
// root is not the host's root, names its host path so the runtime finds
// the node there while the container sees it at /dev/nvidia0.
func DeviceNodeUnder(devRoot, lookupDevRoot string) func(string) (cdispecs.DeviceNode, error) {
	if lookupDevRoot == "" {
		lookupDevRoot = devRoot
	}
	return func(path string) (cdispecs.DeviceNode, error) {
		node, err := cdispec.HostDeviceNode(filepath.Join(lookupDevRoot, path))
		if err != nil {
			return cdispecs.DeviceNode{}, err
		}
		node.Path = path
		if filepath.Clean(devRoot) != "/" {
			node.HostPath = filepath.Join(devRoot, path)
		}
		return node, nil
	}
}
