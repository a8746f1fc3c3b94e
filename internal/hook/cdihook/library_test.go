// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
)

// A GPU Operator node: the driver lives in its container, whose root the
// host sees at /run/nvidia/driver; the host's own library directories have
// no NVML. The hook must load the driver root's library and nothing else.
func TestFindNVMLUnderTheDriverRoot(t *testing.T) {
	host := t.TempDir()
	// The host has library directories, but no NVML in them.
	for _, d := range []string{"usr/lib64", "usr/lib/x86_64-linux-gnu"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	operator := filepath.Join(host, "run/nvidia/driver")
	resolved := writeLib(t, filepath.Join(operator, "usr/lib64"), "libnvidia-ml.so.615.23.01")
	// Ubuntu-based driver containers: lib/x86_64-linux-gnu, a relative link.
	ubuntu := filepath.Join(host, "ubuntu-driver")
	ubuntuReal := writeLib(t, filepath.Join(ubuntu, "usr/lib/x86_64-linux-gnu"), "libnvidia-ml.so.570.86.10")
	link := func(target, at string) {
		t.Helper()
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	// Inside the driver container the link is absolute; on the host it
	// must resolve under the root, not to the host's /usr/lib64.
	link("/usr/lib64/libnvidia-ml.so.615.23.01", filepath.Join(operator, "usr/lib64/libnvidia-ml.so.1"))
	link("libnvidia-ml.so.570.86.10", filepath.Join(ubuntu, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
	// A link that tries to climb out of the root stays inside it.
	escape := filepath.Join(host, "escape")
	if err := os.MkdirAll(filepath.Join(escape, "usr/lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("../../../../../outside/libnvidia-ml.so.1", filepath.Join(escape, "usr/lib64/libnvidia-ml.so.1"))
	writeLib(t, filepath.Join(host, "outside"), "libnvidia-ml.so.1")
	loop := filepath.Join(host, "loop")
	if err := os.MkdirAll(filepath.Join(loop, "lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("libnvidia-ml.so.1", filepath.Join(loop, "lib64/libnvidia-ml.so.1"))

	for _, tc := range []struct {
		name, root, want, err string
	}{
		{name: "GPU Operator root, absolute link", root: operator, want: resolved},
		{name: "Ubuntu driver root, relative link", root: ubuntu, want: ubuntuReal},
		{name: "the host's library path has none", root: host, err: "libnvidia-ml.so.1 not found under the driver root " + host},
		{name: "a link out of the root", root: escape, err: "libnvidia-ml.so.1 not found under the driver root"},
		{name: "a link loop", root: loop, err: "more than 16 symbolic links"},
		{name: "a root that does not exist", root: filepath.Join(host, "run/nvidia/none"), err: "not a directory on this host"},
		{name: "a relative root", root: "run/nvidia/driver", err: "must be an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cdihook.FindNVML(tc.root)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("FindNVML(%s) = %q, %v; want an error containing %q", tc.root, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FindNVML(%s) = %q, %v; want %q", tc.root, got, err, tc.want)
			}
		})
	}
}
