// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const gib = int64(1) << 30

func device(dev string, minor int, share string, soft, hard int64) plan.Device {
	return plan.Device{
		Request: "gpu", Pool: "node-a", Device: dev, ShareID: ptr.To(types.UID(share)),
		GPU:            domain.GPU{UUID: "GPU-" + dev, Index: minor, Minor: minor, MemoryBytes: uint64(141 * gib)},
		SoftLimitBytes: soft, HardLimitBytes: hard, ComputeMode: v1alpha1.TimeSlicing, Enforcement: domain.EnforcementDMem,
	}
}

func opts() cdispec.Options {
	return cdispec.Options{
		HookPath:   "/var/lib/gpufrac/bin/gpufrac-cdi-hook",
		HookArgs:   []string{"--simulate-record=/tmp/rec.jsonl"},
		DeviceNode: gpusim.DeviceNode,
		// 2Gi, written in bytes as the kernel takes it.
		ShmSizeBytes: 2 * gib,
	}
}

// inject runs the code containerd runs: a CDI cache over the spec directory
// and InjectDevices onto a container's OCI spec.
func inject(t *testing.T, dir string, ids []string) *oci.Spec {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library refuses our specs: %v", errs)
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/usr/bin"}}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, ids...)
	if err != nil {
		t.Fatalf("InjectDevices(%v): unresolved %v: %v", ids, unresolved, err)
	}
	return spec
}

func envOf(spec *oci.Spec) map[string]string {
	out := map[string]string{}
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// writeInjected writes claim's CDI spec with w into dir and returns the
// container spec that injecting its devices makes.
func writeInjected(t *testing.T, w *cdispec.Writer, dir string, claim *plan.Claim) *oci.Spec {
	t.Helper()
	ids, err := w.Write(claim)
	if err != nil {
		t.Fatal(err)
	}
	return inject(t, dir, ids)
}

// checkEnv fails t for each variable of want that env does not hold with
// its value.
func checkEnv(t *testing.T, env, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s=%q, want %q", k, env[k], v)
		}
	}
}

func TestInjectTimeSlicingClaim(t *testing.T) {
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, opts())
	if err != nil {
		t.Fatal(err)
	}
	claim := &plan.Claim{UID: "uid-1", Namespace: "ns", Name: "llm", Devices: []plan.Device{
		device("gpu-0", 0, "s1", 40*gib, 60*gib),
		device("gpu-3", 3, "s2", 20*gib, 20*gib),
	}}
	ids, err := w.Write(claim)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k8s.gpufrac.dev/fraction=uid-1-gpu-0-s1", "k8s.gpufrac.dev/fraction=uid-1-gpu-3-s2"}; !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "k8s.gpufrac.dev-fraction_uid-1.json")); err != nil {
		t.Errorf("spec file: %v", err)
	}
	spec := inject(t, dir, ids)

	env := envOf(spec)
	checkEnv(t, env, map[string]string{
		"NVIDIA_VISIBLE_DEVICES":      "GPU-gpu-0,GPU-gpu-3",
		"GPUFRAC_GPU_MEMORY_REQUESTS": "40960,20480",
		"GPUFRAC_GPU_MEMORY_LIMITS":   "61440,20480",
		"GPUFRAC_CLAIM":               "ns/llm",
		"PATH":                        "/usr/bin",
	})
	if _, ok := env["CUDA_MPS_PIPE_DIRECTORY"]; ok {
		t.Error("a TimeSlicing container must not join an MPS server")
	}
	checkMounts(t, spec, []oci.Mount{shm(opts().ShmSizeBytes)})

	var nodes []string
	for _, d := range spec.Linux.Devices {
		nodes = append(nodes, d.Path)
		if d.Path == "/dev/nvidia3" && (d.Type != "c" || d.Major != 195 || d.Minor != 3) {
			t.Errorf("/dev/nvidia3 = %s %d:%d, want c 195:3", d.Type, d.Major, d.Minor)
		}
	}
	slices.Sort(nodes)
	if want := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl"}; !slices.Equal(nodes, want) {
		t.Errorf("device nodes %v, want %v", nodes, want)
	}
	// The device cgroup must allow exactly those devices.
	allowed := 0
	for _, r := range spec.Linux.Resources.Devices {
		if r.Allow {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d device cgroup rules allow access, want 5", allowed)
	}

	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) != 1 {
		t.Fatalf("hooks %+v, want one createRuntime hook", spec.Hooks)
	}
	h := spec.Hooks.CreateRuntime[0]
	wantArgs := []string{"gpufrac-cdi-hook", "apply",
		"--gpu", "GPU-gpu-0=42949672960:64424509440",
		"--gpu", "GPU-gpu-3=21474836480:21474836480",
		"--simulate-record=/tmp/rec.jsonl"}
	if h.Path != "/var/lib/gpufrac/bin/gpufrac-cdi-hook" || !slices.Equal(h.Args, wantArgs) {
		t.Errorf("hook %s %v, want %v", h.Path, h.Args, wantArgs)
	}
}

// An SMSharing container joins the GPU's MPS server: on legacy MPS through
// the daemon's pipe directory, on MPS v3 through its own namespace's
// directory only, so it cannot reach another claim's namespace.
func TestInjectSMSharingClaim(t *testing.T) {
	root := filepath.Dir(mpslayout.For("/var/lib/kubelet/plugins/gpufrac.dev/mps", "GPU-gpu-1").PipeDir)
	for _, tc := range []struct {
		version, namespace, pipe string
	}{
		{version: "", pipe: root + "/pipe"},
		{version: domain.MPSVersionV3, namespace: "c1234", pipe: root + "/pipe/gpufrac/c1234"},
	} {
		t.Run("mps "+tc.version, func(t *testing.T) {
			dir := t.TempDir()
			w, err := cdispec.NewWriter(dir, opts())
			if err != nil {
				t.Fatal(err)
			}
			d := device("gpu-1", 1, "s1", 16*gib, 24*gib)
			d.ComputeMode = v1alpha1.SMSharing
			d.ActiveThreadPercentage = ptr.To[int32](30)
			d.MPS = mpslayout.For("/var/lib/kubelet/plugins/gpufrac.dev/mps", d.GPU.UUID)
			d.MPS.Version, d.MPS.Namespace = tc.version, tc.namespace
			claim := &plan.Claim{UID: "uid-2", Namespace: "ns", Name: "sm", Devices: []plan.Device{d}}
			spec := writeInjected(t, w, dir, claim)
			env := envOf(spec)
			checkEnv(t, env, map[string]string{
				"CUDA_MPS_PIPE_DIRECTORY":           "/tmp/nvidia-mps",
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "GPU-gpu-1=24576M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
			})
			if v, ok := env["CUDA_MPS_LOG_DIRECTORY"]; ok {
				t.Errorf("env CUDA_MPS_LOG_DIRECTORY=%q: a client is not given the daemon's log", v)
			}
			checkMounts(t, spec, []oci.Mount{
				shm(opts().ShmSizeBytes),
				{Destination: "/tmp/nvidia-mps", Source: tc.pipe, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
			})
		})
	}
}

// shm is the /dev/shm every fraction container gets: a tmpfs of its own.
func shm(size int64) oci.Mount {
	opts := []string{"nosuid", "nodev", "noexec", "mode=1777"}
	if size > 0 {
		opts = append(opts, "size="+strconv.FormatInt(size, 10))
	}
	return oci.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "gpufrac-shm", Options: opts}
}

// checkMounts pins every mount the spec adds to a container (the OCI spec
// starts with none), in the runtime's order.
func checkMounts(t *testing.T, spec *oci.Spec, want []oci.Mount) {
	t.Helper()
	if !reflect.DeepEqual(spec.Mounts, want) {
		t.Errorf("mounts:\n%s\nwant:\n%s", mountList(spec.Mounts), mountList(want))
	}
}

func mountList(ms []oci.Mount) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "  %s %s from %s %v\n", m.Destination, m.Type, m.Source, m.Options)
	}
	return b.String()
}

// TestTenantMounts pins what each kind of fraction container sees of the
// node's files: its own /dev/shm (capped), the MPS pipe directory of its
// route alone, and never the daemon's log or shm directory, which every
// client of a GPU shared before (issue 33).
func TestTenantMounts(t *testing.T) {
	const root = "/var/lib/kubelet/plugins/gpufrac.dev/mps"
	binding := mpslayout.For(root, "GPU-gpu-2")
	hidden := oci.Mount{Destination: "/tmp/nvidia-mps/gpufrac", Type: "tmpfs", Source: "gpufrac-hidden",
		Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4k", "mode=0555"}}
	pipe := func(src string) oci.Mount {
		return oci.Mount{Destination: "/tmp/nvidia-mps", Source: src, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}}
	}
	for _, tc := range []struct {
		name      string
		mode      v1alpha1.ComputeMode
		version   string
		namespace string
		noMPS     bool
		shmSize   int64
		want      []oci.Mount
	}{{
		name: "TimeSlicing, not an MPS client", mode: v1alpha1.TimeSlicing, noMPS: true, shmSize: 8 * gib,
		want: []oci.Mount{shm(8 * gib)},
	}, {
		name: "TimeSlicing on MPS v3: the main socket, the shared server's subtree covered", mode: v1alpha1.TimeSlicing,
		version: domain.MPSVersionV3, shmSize: 64 << 20,
		want: []oci.Mount{shm(64 << 20), pipe(binding.PipeDir), hidden},
	}, {
		name: "SMSharing on MPS v3: its namespace alone", mode: v1alpha1.SMSharing,
		version: domain.MPSVersionV3, namespace: "c0123456789abcdef",
		want: []oci.Mount{shm(0), pipe(binding.PipeDir + "/gpufrac/c0123456789abcdef")},
	}, {
		name: "SMSharing on legacy MPS: the daemon's pipe directory", mode: v1alpha1.SMSharing, shmSize: gib,
		want: []oci.Mount{shm(gib), pipe(binding.PipeDir)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := opts()
			o.ShmSizeBytes = tc.shmSize
			w, err := cdispec.NewWriter(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			d := device("gpu-2", 2, "s1", 16*gib, 24*gib)
			d.ComputeMode = tc.mode
			if !tc.noMPS {
				b := *binding
				b.Version, b.Namespace = tc.version, tc.namespace
				d.MPS = &b
			}
			spec := writeInjected(t, w, dir, &plan.Claim{UID: "uid-3", Namespace: "ns", Name: "t", Devices: []plan.Device{d}})
			checkMounts(t, spec, tc.want)
			for _, m := range spec.Mounts {
				if strings.HasPrefix(m.Source, binding.LogDir) || strings.HasPrefix(m.Source, binding.ShmDir) {
					t.Errorf("the container gets %s from %s: the daemon's own", m.Destination, m.Source)
				}
			}
		})
	}
}

func TestRemoveAndList(t *testing.T) {
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, opts())
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []types.UID{"a", "b"} {
		if _, err := w.Write(&plan.Claim{UID: uid, Namespace: "ns", Name: string(uid), Devices: []plan.Device{device("gpu-0", 0, "s-"+string(uid), gib, gib)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "other-vendor.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := w.List()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []types.UID{"a", "b"}) {
		t.Errorf("List = %v, want [a b]", got)
	}
	if err := w.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove("a"); err != nil {
		t.Errorf("removing a missing spec: %v", err)
	}
	if ok, _ := w.Exists("a"); ok {
		t.Error("spec a still exists")
	}
	if ok, _ := w.Exists("b"); !ok {
		t.Error("spec b is gone")
	}
}

func TestHostDeviceNode(t *testing.T) {
	node, err := cdispec.HostDeviceNode("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	if node.Type != "c" || node.Major != 1 || node.Minor != 3 {
		t.Errorf("/dev/null = %s %d:%d, want c 1:3", node.Type, node.Major, node.Minor)
	}
	if _, err := cdispec.HostDeviceNode("/dev/nvidia-does-not-exist"); err == nil || !strings.Contains(err.Error(), "is the NVIDIA driver loaded?") {
		t.Errorf("got %v, want an error that suggests the driver", err)
	}
}

// TestFailedWriteLeavesNoTempFile: a spec write that fails (here the
// rename, onto a directory in the spec's place) removes its temp file at
// once; RemoveLeftovers removes gpufrac's leftovers of a crash, of this
// release's writer and of the CDI library's, and keeps another producer's.
func TestFailedWriteLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, opts())
	if err != nil {
		t.Fatal(err)
	}
	c := &plan.Claim{UID: "uid-1", Namespace: "ns", Name: "c", Devices: []plan.Device{device("gpu-0", 0, "s1", 40*gib, 40*gib)}}
	if err := os.MkdirAll(filepath.Join(w.Path(c.UID), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(c); err == nil {
		t.Fatal("a write onto a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the CDI directory holds %d entries after the failed write, want the obstacle alone: %v", len(entries), entries)
	}
	files := map[string]string{
		cdispec.SpecName("uid-2") + ".tmp-123": `{"cdiVersion":"0.6.0","kind":"k8s.gpufrac.dev/fraction"`,
		"spec.1.tmp":                           `{"cdiVersion":"0.6.0","kind":"k8s.gpufrac.dev/fraction","dev`,
		"spec.2.tmp":                           `{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu"`,
		"spec.3.tmp":                           ``,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, ctx := ktesting.NewTestContext(t)
	w.RemoveLeftovers(klog.FromContext(ctx))
	for name := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := err != nil; gone != (name == cdispec.SpecName("uid-2")+".tmp-123" || name == "spec.1.tmp") {
			t.Errorf("%s: removed %v", name, gone)
		}
	}
}

func TestShmSize(t *testing.T) {
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	if err := os.WriteFile(meminfo, []byte("MemFree:  1000 kB\nMemTotal:       263842468 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value, meminfo string
		want           int64
		err            string
	}{
		{value: "8Gi", want: 8 * gib},
		{value: "", meminfo: meminfo, want: 263842468 << 10 / 2},
		{value: "512Ki", err: "at least 1Mi"},
		{value: "lots", err: `--shm-size "lots"`},
		{value: "", meminfo: filepath.Join(dir, "none"), err: "reading the node's memory"},
	} {
		got, err := cdispec.ShmSize(tc.value, tc.meminfo)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ShmSize(%q) = %d, %v; want an error with %q", tc.value, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ShmSize(%q) = %d, %v; want %d", tc.value, got, err, tc.want)
		}
	}
}
