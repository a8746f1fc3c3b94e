// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The legacy shell's commands with NVIDIA's own examples and forms
// (mpsv2-interface: "set_default_device_pinned_mem_limit 0 10G", a device
// as a UUID or an ordinal, a value as an integer with G or M) are accepted;
// what that page does not allow is refused, as the v3 grammar refuses.
func TestLegacyGrammarChecksArguments(t *testing.T) {
	for _, line := range []string{
		"get_server_list",
		"quit",
		"get_default_active_thread_percentage",
		"set_default_active_thread_percentage 25",
		"set_default_device_pinned_mem_limit 0 10G",
		"set_default_device_pinned_mem_limit GPU-7b2a0d3e-1c4f-4e8b-9a6d-0123456789ab 24576M",
		"get_default_device_pinned_mem_limit 0",
		"set_device_pinned_mem_limit 48201 GPU-a 2G",
		"set_active_thread_percentage 48201 50",
	} {
		if _, err := parseLegacy(line); err != nil {
			t.Errorf("%q refused: %v", line, err)
		}
	}
	for _, tc := range []struct{ line, why string }{
		{"set_default_device_pinned_mem_limit GPU-a 24576", "an integer followed by G or M"},
		{"set_default_device_pinned_mem_limit GPU-a 24GB", "an integer followed by G or M"},
		{"set_default_device_pinned_mem_limit GPU-a 1024K", "an integer followed by G or M"},
		{"set_default_device_pinned_mem_limit GPU-a", "takes 2 arguments"},
		{"set_default_device_pinned_mem_limit 24576M GPU-a", "a GPU UUID or an integer ordinal"},
		{"set_default_device_pinned_mem_limit gpu0 1G", "a GPU UUID or an integer ordinal"},
		{"get_default_device_pinned_mem_limit", "takes 1 arguments"},
		{"set_default_active_thread_percentage 0", "from 1 to 100"},
		{"set_default_active_thread_percentage 101", "from 1 to 100"},
		{"set_default_active_thread_percentage half", "from 1 to 100"},
		{"set_device_pinned_mem_limit GPU-a 48201 2G", "not a process id"},
		{"set_active_thread_percentage 48201", "takes 2 arguments"},
		{"get_server_list now", "takes 0 arguments"},
		{"namespace list", "unknown command"},
	} {
		_, err := parseLegacy(tc.line)
		if err == nil {
			t.Errorf("%q accepted", tc.line)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: error %q does not say %q", tc.line, err, tc.why)
		}
	}
}

// client list prints NVIDIA's documented row (mpsv3-interface:
// "51023,training,0,default,python train.py"), and with
// MPSDOUBLE_CLIENT_LIST=observed-615 the row KAI's operator read from an
// r615 driver ("<pid>,srv,GPU-…,srv/default (0),<cmd>").
func TestClientListRowShapes(t *testing.T) {
	for _, tc := range []struct{ shape, row string }{
		{"", "%d,gpufrac,0,c_a,fakecuda"},
		{"documented", "%d,gpufrac,0,c_a,fakecuda"},
		{clientListObserved615, "%d,gpufrac,GPU-a,gpufrac/c_a (0),fakecuda"},
	} {
		t.Run("shape="+tc.shape, func(t *testing.T) {
			t.Setenv("MPSDOUBLE_CLIENT_LIST", tc.shape)
			w := startWorld(t, "GPU-a=81920", gpufracTOML)
			if err := w.ctl("namespace", "create", "c_a", "--server=gpufrac"); err != nil {
				t.Fatal(err)
			}
			c, out := w.client(filepath.Join(w.pipe, "gpufrac", "c_a"), "-device", "GPU-a", "alloc", "1024", "hold", "0")
			t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
			waitFor(t, out, "cuMemAlloc(1024 MiB): CUDA_SUCCESS")
			got := w.ctlOut("client", "list", "--server=gpufrac", "--format=csv,noheader")
			want := strings.ReplaceAll(tc.row, "%d", strconv.Itoa(c.Process.Pid))
			if !slices.Contains(strings.Split(got, "\n"), want) {
				t.Errorf("client list printed %q, want the row %q", got, want)
			}
		})
	}
}

func (w *world) ctlOut(args ...string) string {
	w.t.Helper()
	cmd := exec.Command(filepath.Join(w.bin, "nvidia-cuda-mps-control"), append([]string{"-p", "3"}, args...)...)
	cmd.Env = w.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
