// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec

import (
	"fmt"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// HostDeviceNode reads a device node's type and numbers from the host, so
// the spec states them and the runtime need not find the node again.
func HostDeviceNode(path string) (cdispec.DeviceNode, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return cdispec.DeviceNode{}, fmt.Errorf("stat %s (is the NVIDIA driver loaded?): %w", path, err)
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return cdispec.DeviceNode{}, fmt.Errorf("%s is not a device node", path)
	}
	return cdispec.DeviceNode{
		Path:  path,
		Type:  typ,
		Major: int64(unix.Major(uint64(st.Rdev))),
		Minor: int64(unix.Minor(uint64(st.Rdev))),
	}, nil
}
