// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
	"github.com/gpufrac/gpufrac/internal/hook/gonvmltest"
	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/hook/record"
)

// procTree fakes /proc/<pid>/cgroup.
func procTree(t *testing.T, pid, content string) string {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

const v2Cgroup = "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope\n"
const v1Cgroup = "12:pids:/kubepods/burstable/podX/abc\n4:memory:/kubepods/burstable/podX/abc\n1:name=systemd:/kubepods/burstable/podX/abc\n"

func TestFindCgroup(t *testing.T) {
	cg, err := cdihook.FindCgroup(procTree(t, "42", v2Cgroup), "/sys/fs/cgroup", 42)
	if err != nil || !cg.V2 || cg.Path != "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope" {
		t.Errorf("v2: %+v %v", cg, err)
	}
	cg, err = cdihook.FindCgroup(procTree(t, "42", v1Cgroup), "/sys/fs/cgroup", 42)
	if err != nil || cg.V2 || cg.Path != "/sys/fs/cgroup/memory/kubepods/burstable/podX/abc" {
		t.Errorf("v1: %+v %v", cg, err)
	}
	// Hybrid (systemd's default on many cgroup-v1 hosts): the unified line
	// names the root of an empty hierarchy, never the container's cgroup.
	hybrid := "0::/\n" + v1Cgroup
	cg, err = cdihook.FindCgroup(procTree(t, "42", hybrid), "/sys/fs/cgroup", 42)
	if err != nil || cg.V2 || cg.Path != "/sys/fs/cgroup/memory/kubepods/burstable/podX/abc" {
		t.Errorf("hybrid: %+v %v", cg, err)
	}
	if _, err := cdihook.FindCgroup(t.TempDir(), "/sys/fs/cgroup", 42); err == nil || !strings.Contains(err.Error(), "cgroup of the container not found") {
		t.Errorf("missing process: %v", err)
	}
}

type call struct {
	uuid, cgroup string
	soft, hard   uint64
}

func recordingServer(ret nvml.Return) (*server.Server, *[]call) {
	srv := dgxh200.New()
	var calls []call
	for _, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.SetMemoryLimits_v1Func = func(cgroup string, soft, hard uint64) nvml.Return {
			calls = append(calls, call{dev.UUID, cgroup, soft, hard})
			return ret
		}
		// No ancestor has per-cgroup limits (no dmem files).
		dev.GetMemoryLimits_v1Func = func(string) (nvml.MemoryLimits_v1, nvml.Return) {
			return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_SUPPORTED
		}
	}
	return srv, &calls
}

// driverRoot is a host driver installation: libnvidia-ml.so.1 in usr/lib64.
func driverRoot(t *testing.T) string {
	root := t.TempDir()
	writeLib(t, filepath.Join(root, "usr/lib64"), "libnvidia-ml.so.1")
	return root
}

func writeLib(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("\x7fELF stand-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// opener loads srv whatever library path the hook found.
func opener(srv nvml.Interface) func(string) (purenvml.Interface, error) {
	return func(string) (purenvml.Interface, error) { return gonvmltest.Wrap(srv), nil }
}

const state = `{"ociVersion":"1.2.0","id":"abc","status":"created","pid":42,"bundle":"/run/b"}`

func TestRunAppliesEveryLimitThroughNVML(t *testing.T) {
	srv, calls := recordingServer(nvml.SUCCESS)
	u0, u5 := srv.Devices[0].(*server.Device).UUID, srv.Devices[5].(*server.Device).UUID
	root := driverRoot(t)
	var loaded string
	err := cdihook.Run(strings.NewReader(state), cdihook.Options{
		Limits:   []cdihook.Limit{{UUID: u0, Soft: 40 << 30, Hard: 60 << 30}, {UUID: u5, Soft: 1 << 30, Hard: 1 << 30}},
		ProcRoot: procTree(t, "42", v2Cgroup), CgroupRoot: "/sys/fs/cgroup", DriverRoot: root,
		Open: func(path string) (purenvml.Interface, error) { loaded = path; return gonvmltest.Wrap(srv), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "usr/lib64/libnvidia-ml.so.1"); loaded != want {
		t.Errorf("loaded NVML from %q, want %q", loaded, want)
	}
	path := "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope"
	want := []call{{u0, path, 40 << 30, 60 << 30}, {u5, path, 1 << 30, 1 << 30}}
	if len(*calls) != 2 || (*calls)[0] != want[0] || (*calls)[1] != want[1] {
		t.Errorf("NVML calls %+v, want %+v", *calls, want)
	}
}

// Every refusal names the cause and what to do; NVML's return codes of
// nvmlDeviceSetMemoryLimits_v1 are read as NVIDIA's reference documents.
func TestRunFailuresSayWhatToDo(t *testing.T) {
	okProc := func(t *testing.T) string { return procTree(t, "42", v2Cgroup) }
	for _, tc := range []struct {
		name  string
		setup func(srv *server.Server)
		ret   nvml.Return
		proc  func(t *testing.T) string
		root  func(t *testing.T) string
		state string
		uuid  string
		claim string
		want  string
	}{
		{name: "no driver", setup: func(s *server.Server) { s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND } },
			want: "NVML is not available (is the NVIDIA driver installed on this node?)"},
		{name: "old driver", setup: func(s *server.Server) {
			s.LookupSymbolFunc = func(string) error { return errors.New("undefined symbol") }
		}, want: "this NVIDIA driver cannot set per-container GPU memory limits (needs r615 / CUDA 13.4 or later; nvmlDeviceSetMemoryLimits_v1 missing)"},
		{name: "INVALID_ARGUMENT", ret: nvml.ERROR_INVALID_ARGUMENT, want: "the soft limit is above the hard limit, or a limit is above the GPU's total memory"},
		{name: "OPERATING_SYSTEM", ret: nvml.ERROR_OPERATING_SYSTEM, want: "the driver cannot open the container's cgroup"},
		{name: "NOT_SUPPORTED", ret: nvml.ERROR_NOT_SUPPORTED, want: "no per-cgroup GPU memory limits here: the cgroup has no GPU memory limit files"},
		{name: "FUNCTION_NOT_FOUND", ret: nvml.ERROR_FUNCTION_NOT_FOUND, want: "this driver has no nvmlDeviceSetMemoryLimits_v1 (it needs r615"},
		{name: "not root", ret: nvml.ERROR_NO_PERMISSION, want: "setting limits needs root"},
		{name: "unknown GPU", uuid: "GPU-gone", want: "GPU GPU-gone is not on this node"},
		{name: "cgroup v1 with real NVML", proc: func(t *testing.T) string { return procTree(t, "42", v1Cgroup) },
			want: "container abc is in cgroup v1 (/sys/fs/cgroup/memory/kubepods/burstable/podX/abc): NVIDIA per-container GPU memory limits need cgroup v2"},
		{name: "cgroup that climbs out of the hierarchy", proc: func(t *testing.T) string { return procTree(t, "42", "0::/../../etc\n") },
			want: "which is not a cgroup below /sys/fs/cgroup"},
		{name: "the root cgroup", proc: func(t *testing.T) string { return procTree(t, "42", "0::/\n") },
			want: "which is not a cgroup below /sys/fs/cgroup"},
		{name: "driver root without NVML", root: func(t *testing.T) string { return t.TempDir() },
			want: "libnvidia-ml.so.1 not found under the driver root"},
		{name: "not a createRuntime hook", state: `{"ociVersion":"1.2.0","id":"abc","status":"creating"}`,
			want: `OCI state of container "abc" has no pid; gpufrac-cdi-hook must run as a createRuntime hook`},
		{name: "container id that is a path", state: `{"ociVersion":"1.2.0","id":"../../etc/x","status":"created","pid":42}`,
			want: `container id "../../etc/x" is not an id a runtime makes`},
		{name: "claim that is a path", claim: "../x", want: `--claim "../x": not a ResourceClaim UID`},
		{name: "garbage on stdin", state: `not json`, want: "reading the OCI container state from stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret := tc.ret
			if ret == 0 {
				ret = nvml.SUCCESS
			}
			srv, _ := recordingServer(ret)
			if tc.setup != nil {
				tc.setup(srv)
			}
			proc, root := okProc, driverRoot
			if tc.proc != nil {
				proc = tc.proc
			}
			if tc.root != nil {
				root = tc.root
			}
			st := state
			if tc.state != "" {
				st = tc.state
			}
			uuid := srv.Devices[0].(*server.Device).UUID
			if tc.uuid != "" {
				uuid = tc.uuid
			}
			err := cdihook.Run(strings.NewReader(st), cdihook.Options{
				Limits: []cdihook.Limit{{UUID: uuid, Soft: 1, Hard: 2}}, ProcRoot: proc(t), CgroupRoot: "/sys/fs/cgroup",
				DriverRoot: root(t), Open: opener(srv), ClaimUID: tc.claim,
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The record names the container from the annotations of whichever
// runtime created it: containerd's io.kubernetes.cri.* keys (seen on the
// real node) or CRI-O's.
func TestRunRecordsTheContainerForMetrics(t *testing.T) {
	for runtime, annotations := range map[string]string{
		"containerd": `"io.kubernetes.cri.sandbox-namespace":"team","io.kubernetes.cri.sandbox-name":"llm-0","io.kubernetes.cri.container-name":"main","io.kubernetes.cri.container-type":"container"`,
		"cri-o":      `"io.kubernetes.pod.namespace":"team","io.kubernetes.pod.name":"llm-0","io.kubernetes.container.name":"main"`,
	} {
		t.Run(runtime, func(t *testing.T) {
			srv, _ := recordingServer(nvml.SUCCESS)
			u := srv.Devices[0].(*server.Device).UUID
			dir := t.TempDir()
			st := `{"ociVersion":"1.2.0","id":"ctr-1","status":"created","pid":42,"bundle":"/b","annotations":{` + annotations + `}}`
			err := cdihook.Run(strings.NewReader(st), cdihook.Options{
				Limits: []cdihook.Limit{{UUID: u, Soft: 1, Hard: 2}}, ProcRoot: procTree(t, "42", v2Cgroup), CgroupRoot: "/sys/fs/cgroup",
				DriverRoot: driverRoot(t), Open: opener(srv), ClaimUID: "uid-1", RecordDir: dir,
			})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(record.Path(dir, "uid-1", "ctr-1"))
			if err != nil {
				t.Fatal(err)
			}
			want := `{"claimUID":"uid-1","namespace":"team","pod":"llm-0","container":"main","cgroup":"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope","gpus":["` + u + `"],"limits":[{"uuid":"` + u + `","soft":1,"hard":2}]}`
			if string(raw) != want {
				t.Errorf("record\n got %s\nwant %s", raw, want)
			}
		})
	}
}
