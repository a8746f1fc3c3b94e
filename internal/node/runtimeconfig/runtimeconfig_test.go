// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package runtimeconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/runtimeconfig"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The toolkit writes its defaults commented out (api/config/v1/toml.go,
// commentDefaults): a file that only mentions the key in a comment leaves
// the default, true, in force.
const commentedDefaults = `#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]
`

func TestReadDecidesFromTheTopLevelKeyOrNVIDIAsDefault(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		noFile        bool
		want          domain.VisibleDevicesEnvvar
		explicit      bool
		err           string
	}{
		{name: "commented-out defaults", content: commentedDefaults, want: domain.VisibleDevicesEnvvarAccepted},
		{name: "empty file", content: "", want: domain.VisibleDevicesEnvvarAccepted},
		{name: "set false", content: "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n" + commentedDefaults, want: domain.VisibleDevicesEnvvarRefused, explicit: true},
		{name: "set true", content: "accept-nvidia-visible-devices-envvar-when-unprivileged = true # kept\n", want: domain.VisibleDevicesEnvvarAccepted, explicit: true},
		{name: "quoted key", content: `"accept-nvidia-visible-devices-envvar-when-unprivileged" = false` + "\n", want: domain.VisibleDevicesEnvvarRefused, explicit: true},
		{name: "in a table, not top-level", content: "[nvidia-container-cli]\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n", want: domain.VisibleDevicesEnvvarAccepted},
		{name: "not a boolean", content: `accept-nvidia-visible-devices-envvar-when-unprivileged = "false"` + "\n", want: domain.VisibleDevicesEnvvarUnknown, err: "want true or false"},
		{name: "not TOML", content: "accept-nvidia-visible-devices-envvar-when-unprivileged: false\n", want: domain.VisibleDevicesEnvvarUnknown, err: "parsing the NVIDIA runtime configuration"},
		{name: "no file", noFile: true, want: domain.VisibleDevicesEnvvarUnknown, err: "no NVIDIA runtime configured at this path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			if !tc.noFile {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := runtimeconfig.Read(path)
			if r.Envvar != tc.want || r.Explicit != tc.explicit {
				t.Errorf("got %s (explicit %t), want %s (explicit %t); err %v", r.Envvar, r.Explicit, tc.want, tc.explicit, r.Err)
			}
			if tc.err == "" && r.Err != nil {
				t.Errorf("unexpected error %v", r.Err)
			}
			if tc.err != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), tc.err)) {
				t.Errorf("error %v, want one saying %q", r.Err, tc.err)
			}
		})
	}
	if r := runtimeconfig.Read(""); r.Envvar != domain.VisibleDevicesEnvvarUnknown || r.Err == nil {
		t.Errorf("no path: %+v, want unknown with a reason", r)
	}
}

func TestMessageNamesTheFileAndTheFix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(commentedDefaults), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := runtimeconfig.Read(path).Message()
	for _, want := range []string{path, "unset (NVIDIA's default: true)", "NVIDIA_VISIBLE_DEVICES", "set it to false"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}
