// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// MIG capability devices. A container reaches one MIG instance through
// its parent's /dev/nvidia<minor> plus two capability device nodes, one
// for the GPU instance and one for the compute instance, at
// /dev/nvidia-caps/nvidia-cap<minor>; the minors are listed in
// /proc/driver/nvidia-caps/mig-minors as "gpu<parent minor>/gi<GI>/access
// <minor>" and "gpu<parent minor>/gi<GI>/ci<CI>/access <minor>", and the
// major is that of "nvidia-caps" in /proc/devices. This is how NVIDIA's
// container toolkit (internal/nvcaps) and DRA driver
// (cmd/gpu-kubelet-plugin/cdi.go, internal/common/nvcaps.go) find them;
// docs/design/nvidia/mig.md cites both.
const (
	MIGMinorsFile  = "/proc/driver/nvidia-caps/mig-minors"
	ProcDevices    = "/proc/devices"
	MIGCapsDevDir  = "/dev/nvidia-caps"
	nvidiaCapsName = "nvidia-caps"
)

// MIGCapPaths are the container paths of the capability devices of MIG
// instance gi/ci on the GPU with parentMinor, read from a mig-minors file.
func MIGCapPaths(migMinors []byte, parentMinor, gi, ci int) ([]string, error) {
	giKey := fmt.Sprintf("gpu%d/gi%d/access", parentMinor, gi)
	ciKey := fmt.Sprintf("gpu%d/gi%d/ci%d/access", parentMinor, gi, ci)
	minors := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(migMinors))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || (f[0] != giKey && f[0] != ciKey) {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: line %q: minor %q is not a number", MIGMinorsFile, sc.Text(), f[1])
		}
		minors[f[0]] = n
	}
	var out []string
	for _, k := range []string{giKey, ciKey} {
		n, ok := minors[k]
		if !ok {
			return nil, fmt.Errorf("%s has no %s: the MIG instance is not configured (or MIG is off) on GPU minor %d", MIGMinorsFile, k, parentMinor)
		}
		out = append(out, fmt.Sprintf("%s/nvidia-cap%d", MIGCapsDevDir, n))
	}
	return out, nil
}

// CharMajor finds the major of the character device driver name in a
// /proc/devices text ("Character devices:" section).
func CharMajor(procDevices []byte, name string) (int, error) {
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(procDevices))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case line == "Block devices:":
			inChar = false
		case inChar:
			f := strings.Fields(line)
			if len(f) == 2 && f[1] == name {
				return strconv.Atoi(f[0])
			}
		}
	}
	return 0, fmt.Errorf("%s lists no character device %q (is the NVIDIA driver loaded with MIG support?)", ProcDevices, name)
}

// HostMIGCaps resolves MIG capability device nodes from the host's
// /proc under procRoot ("/" normally): the container gets the nodes
// created with their numbers, so they need not exist on the host.
func HostMIGCaps(procRoot string) func(parentMinor, gi, ci int) ([]cdispec.DeviceNode, error) {
	return func(parentMinor, gi, ci int) ([]cdispec.DeviceNode, error) {
		minors, err := os.ReadFile(filepath.Join(procRoot, MIGMinorsFile))
		if err != nil {
			return nil, fmt.Errorf("reading the MIG capability minors: %w", err)
		}
		paths, err := MIGCapPaths(minors, parentMinor, gi, ci)
		if err != nil {
			return nil, err
		}
		devs, err := os.ReadFile(filepath.Join(procRoot, ProcDevices))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", ProcDevices, err)
		}
		major, err := CharMajor(devs, nvidiaCapsName)
		if err != nil {
			return nil, err
		}
		return CapNodes(paths, major)
	}
}

// CapNodes are the device nodes at paths (/dev/nvidia-caps/nvidia-cap<N>)
// with the given major.
func CapNodes(paths []string, major int) ([]cdispec.DeviceNode, error) {
	out := make([]cdispec.DeviceNode, 0, len(paths))
	for _, p := range paths {
		minor, err := strconv.Atoi(strings.TrimPrefix(p, MIGCapsDevDir+"/nvidia-cap"))
		if err != nil {
			return nil, fmt.Errorf("%s is not a MIG capability device path", p)
		}
		out = append(out, cdispec.DeviceNode{Path: p, Type: "c", Major: int64(major), Minor: int64(minor)})
	}
	return out, nil
}
