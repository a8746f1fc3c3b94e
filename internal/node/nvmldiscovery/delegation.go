// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nvmldiscovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A container's cgroup has dmem files (where NVML sets its limits) only
// where its parent enables the controller in cgroup.subtree_control, and a
// parent can enable only what its own parent enabled: +dmem must run
// contiguously from the hierarchy's root down to every pod's cgroup
// (NVIDIA, mpsv3-memory-partitioning: limits only on a cgroup with dmem
// files, else "not found"; propagation stops at the first ancestor
// without dmem.min). A node where it does not would advertise dmem and
// then fail every limited container at creation.

// kubeletTops are the names the kubelet gives the top of its pod tree
// under the systemd and the cgroupfs drivers.
var kubeletTops = []string{"kubepods.slice", "kubepods"}

// DmemUndelegated walks the cgroup hierarchy mounted at root from its top
// down the kubelet's pod tree (the kubepods cgroup, its QoS-class and
// Guaranteed pod cgroups, and the pods of each QoS class) and returns the
// first cgroup, relative to root ("." for root itself), whose
// cgroup.subtree_control does not enable dmem; "" when every level that
// exists does. A cgroup that goes while it is read (a pod ending) is
// skipped. Without a kubelet tree only the root is checked.
func DmemUndelegated(root string) (string, error) {
	levels := []string{"."}
	for _, top := range kubeletTops {
		if fi, err := os.Stat(filepath.Join(root, top)); err == nil && fi.IsDir() {
			levels = append(levels, top)
			for _, child := range subdirs(filepath.Join(root, top)) {
				levels = append(levels, filepath.Join(top, child))
			}
			for _, child := range subdirs(filepath.Join(root, top)) {
				for _, pod := range subdirs(filepath.Join(root, top, child)) {
					levels = append(levels, filepath.Join(top, child, pod))
				}
			}
			break
		}
	}
	for _, l := range levels {
		raw, err := os.ReadFile(filepath.Join(root, l, "cgroup.subtree_control"))
		if errors.Is(err, os.ErrNotExist) && l != "." {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading which controllers %s delegates: %w", filepath.Join(root, l), err)
		}
		if !containsField(string(raw), "dmem") {
			return l, nil
		}
	}
	return "", nil
}

func subdirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func containsField(s, field string) bool {
	for _, f := range strings.Fields(s) {
		if f == field {
			return true
		}
	}
	return false
}
