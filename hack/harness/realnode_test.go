// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

func TestParseProbe(t *testing.T) {
	r := ParseProbe("PROBE BEGIN\nENV NVIDIA_VISIBLE_DEVICES=GPU-1\nENV A=b=c\nDEV /dev/nvidia3 c 195:3\nMOUNT /tmp/nvidia-mps\nMPSPIPE control.sock\nSHMMOUNT 0:61 tmpfs gpufrac-shm rw,nosuid rw,size=65536k\nPROBE END\n")
	if r.Env["NVIDIA_VISIBLE_DEVICES"] != "GPU-1" || r.Env["A"] != "b=c" || r.Devices["/dev/nvidia3"] != "c 195:3" ||
		len(r.Mounts) != 1 || r.Mounts[0] != "/tmp/nvidia-mps" || len(r.MPSPipe) != 1 ||
		!slices.Equal(r.Shm, []string{"0:61", "tmpfs", "gpufrac-shm", "rw,nosuid", "rw,size=65536k"}) {
		t.Errorf("parsed %+v", r)
	}
}

// TestNodeConfigsFollowTheMachine: the special cases of a cgroup-v1 machine
// without CAP_SYS_RESOURCE appear only where detected.
func TestNodeConfigsFollowTheMachine(t *testing.T) {
	plain := nodeQuirks{snapshotter: "overlayfs"}
	odd := nodeQuirks{cgroupV1: true, noSysResource: true, snapshotter: "native"}
	if k := kubeletConfig("/r", "/ca", 1, 2, plain); strings.Contains(k, "failCgroupV1") {
		t.Errorf("cgroup v2 node configured for v1:\n%s", k)
	}
	if k := kubeletConfig("/r", "/ca", 1, 2, odd); !strings.Contains(k, "failCgroupV1: false") || !strings.Contains(k, "cgroupRoot: /r") {
		t.Errorf("cgroup v1 node:\n%s", k)
	}
	if c := containerdConfig("/bin", "/bin/runc", "/cdi", "/net", plain); !strings.Contains(c, "restrict_oom_score_adj = false") || !strings.Contains(c, `snapshotter = "overlayfs"`) {
		t.Errorf("plain machine:\n%s", c)
	}
	c := containerdConfig("/bin", "/bin/runc", "/cdi", "/net", odd)
	for _, want := range []string{"restrict_oom_score_adj = true", `snapshotter = "native"`, `cdi_spec_dirs = ["/cdi"]`, `sandbox = "` + NodeImage + `"`} {
		if !strings.Contains(c, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, c)
		}
	}
}

// TestHostToolsBringTheirLibraries: the image's shell runs without the
// host's file system, so its loader and libc come along.
func TestHostToolsBringTheirLibraries(t *testing.T) {
	needLDD(t)
	files, err := hostTools(context.Background(), []string{"sh"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	joined := strings.Join(paths, " ")
	if !strings.Contains(joined, "/bin/sh") {
		t.Errorf("no /bin/sh in %v", paths)
	}
	if libs, _ := sharedLibraries(context.Background(), "/bin/sh"); len(libs) > 0 && !strings.Contains(joined, "libc.so") {
		t.Errorf("a dynamic /bin/sh without libc: %v", paths)
	}
}

// needLDD skips a test that reads a binary's libraries with ldd where
// there is none, except where the tests must run (GPUFRAC_E2E=required,
// as CI sets it as root): there a missing ldd fails, so CI cannot pass
// without the only checks of the image's and the node image's libraries.
func needLDD(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("ldd")
	mustrun.Need(t, err == nil, "ldd is not on PATH")
}
