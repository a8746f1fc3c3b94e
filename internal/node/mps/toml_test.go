// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/mps"
)

// A node server lists every GPU it serves in one allowed_devices,
// comma-separated, as NVIDIA's configuration page shows
// (docs/design/nvidia/mps-multi-gpu.md M1); a per-GPU daemon lists its one GPU.
func TestDaemonTOMLListsEveryGPUOfANodeServer(t *testing.T) {
	got, err := mps.DaemonTOML("615.23.01", "gpufrac", "GPU-a", "GPU-b")
	if err != nil {
		t.Fatal(err)
	}
	want := `schema_version = "1.0"

[servers.gpufrac]
allowed_devices = "GPU-a,GPU-b"

[features.memacct]
enabled = true
audit_log = true

[features.context-share]
enabled = true
default_socket = "off"
`
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("node server TOML\n got:\n%s\nwant:\n%s", got, want)
	}
	one, err := mps.DaemonTOML("615.23.01", "gpufrac", "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(one, "allowed_devices = \"GPU-a\"\n") {
		t.Errorf("per-GPU TOML does not list its one GPU:\n%s", one)
	}
}

func TestDaemonTOMLRefusesABadDeviceList(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []string
		want string
	}{
		{"no GPU", nil, "no GPU given"},
		{"a GPU twice", []string{"GPU-a", "GPU-a"}, "GPU GPU-a listed twice"},
		{"a comma inside a UUID", []string{"GPU-a,GPU-b"}, `GPU UUID "GPU-a,GPU-b" is empty or holds a comma`},
		{"an empty UUID", []string{"GPU-a", ""}, `GPU UUID "" is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mps.DaemonTOML("615.23.01", "gpufrac", tc.gpus...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
