// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

// VisibleDevicesEnvvar is what a node's NVIDIA container runtime does with
// NVIDIA_VISIBLE_DEVICES set by an unprivileged container, as the plugin
// read it from the runtime's configuration (internal/node/runtimeconfig).
// Where it is accepted, any pod on the node can name GPUs itself, past the
// scheduler's accounting (docs/install.md, "Before you install").
type VisibleDevicesEnvvar string

const (
	// VisibleDevicesEnvvarAccepted means the configuration sets
	// accept-nvidia-visible-devices-envvar-when-unprivileged = true, or
	// leaves it unset (NVIDIA's default is true).
	VisibleDevicesEnvvarAccepted VisibleDevicesEnvvar = "accepted"
	// VisibleDevicesEnvvarRefused means the configuration sets it to false.
	VisibleDevicesEnvvarRefused VisibleDevicesEnvvar = "refused"
	// VisibleDevicesEnvvarUnknown means the plugin was not given the
	// configuration, or could not read it.
	VisibleDevicesEnvvarUnknown VisibleDevicesEnvvar = "unknown"
)
