// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package runtimeconfig reads the host's NVIDIA container runtime
// configuration (/etc/nvidia-container-runtime/config.toml) for the one
// setting that decides whether a pod can name GPUs itself:
// accept-nvidia-visible-devices-envvar-when-unprivileged. Where it is true
// (NVIDIA's default), the runtime gives an unprivileged container the GPUs
// its NVIDIA_VISIBLE_DEVICES names, whatever its claims hold
// (docs/design/nvidia/toolkit.md, "The runtime's side door").
package runtimeconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/BurntSushi/toml"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// AcceptEnvvarKey is the top-level key of NVIDIA's config.toml
// (NVIDIA/nvidia-container-toolkit api/config/v1/config.go, Config's
// AcceptEnvvarUnprivileged).
const AcceptEnvvarKey = "accept-nvidia-visible-devices-envvar-when-unprivileged"

// AcceptEnvvarDefault is the toolkit's value when the key is unset
// (GetDefault in the same file: AcceptEnvvarUnprivileged: true).
const AcceptEnvvarDefault = true

// DefaultPath is where the toolkit reads its configuration on a host
// install ("/etc" joined with RelativeFilePath,
// "nvidia-container-runtime/config.toml").
const DefaultPath = "/etc/nvidia-container-runtime/config.toml"

// Report is what the plugin found.
type Report struct {
	Path   string
	Envvar domain.VisibleDevicesEnvvar
	// Explicit is true when the file sets the key; false when the
	// toolkit's default decided.
	Explicit bool
	// Err says why the answer is unknown; nil otherwise.
	Err error
}

// Read reads path. An empty path (not configured), a missing or unreadable
// file, or one that is not TOML gives VisibleDevicesEnvvarUnknown with the
// reason in Err.
func Read(path string) Report {
	r := Report{Path: path, Envvar: domain.VisibleDevicesEnvvarUnknown}
	if path == "" {
		r.Err = errors.New("no NVIDIA runtime configuration given (--nvidia-runtime-config)")
		return r
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		r.Err = fmt.Errorf("reading the NVIDIA runtime configuration %s: %w (no NVIDIA runtime configured at this path)", path, err)
		return r
	}
	if err != nil {
		r.Err = fmt.Errorf("reading the NVIDIA runtime configuration %s: %w", path, err)
		return r
	}
	var cfg map[string]any
	if _, err := toml.Decode(string(raw), &cfg); err != nil {
		r.Err = fmt.Errorf("parsing the NVIDIA runtime configuration %s: %w", path, err)
		return r
	}
	accept := AcceptEnvvarDefault
	if v, set := cfg[AcceptEnvvarKey]; set {
		b, ok := v.(bool)
		if !ok {
			r.Err = fmt.Errorf("NVIDIA runtime configuration %s: %s = %v: want true or false", path, AcceptEnvvarKey, v)
			return r
		}
		accept, r.Explicit = b, true
	}
	r.Envvar = domain.VisibleDevicesEnvvarRefused
	if accept {
		r.Envvar = domain.VisibleDevicesEnvvarAccepted
	}
	return r
}

// Message is the sentence the node's Event and the log carry for an
// accepting node.
func (r Report) Message() string {
	how := "sets " + AcceptEnvvarKey + " = true"
	if !r.Explicit {
		how = "leaves " + AcceptEnvvarKey + " unset (NVIDIA's default: true)"
	}
	return fmt.Sprintf("the NVIDIA container runtime's configuration %s %s: any unprivileged pod on this node can name GPUs with NVIDIA_VISIBLE_DEVICES past the scheduler and gpufrac's limits; set it to false and use CDI (docs/install.md)", r.Path, how)
}
