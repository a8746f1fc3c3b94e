// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The root is the highest ancestor below the hierarchy's mount: the
// top of the kubelet's tree, whatever the cgroup driver names it.
func TestReservationRoot(t *testing.T) {
	for _, tc := range []struct {
		path, mount, want string
		ok                bool
	}{
		{"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podX.slice/cri-containerd-abc.scope", "/sys/fs/cgroup", "/sys/fs/cgroup/kubepods.slice", true},
		{"/sys/fs/cgroup/kubepods/burstable/podX/abc", "/sys/fs/cgroup", "/sys/fs/cgroup/kubepods", true},
		{"/sys/fs/cgroup/memory/e2e-root/kubepods/podX/abc", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/memory/e2e-root", true},
		{"/sys/fs/cgroup/kubepods/abc", "/sys/fs/cgroup/", "/sys/fs/cgroup/kubepods", true},
		{"/sys/fs/cgroup/abc", "/sys/fs/cgroup", "", false},
		{"/sys/fs/cgroupx/a/b", "/sys/fs/cgroup", "", false},
	} {
		got, ok := cdihook.ReservationRoot(cdihook.Cgroup{Path: tc.path, Root: tc.mount, V2: true})
		if got != tc.want || ok != tc.ok {
			t.Errorf("ReservationRoot(%s under %s) = %q %v, want %q %v", tc.path, tc.mount, got, ok, tc.want, tc.ok)
		}
	}
}

// nvmlCall is one NVML limits call, in the order the hook made it.
func nvmlCall(op, cg string, soft, hard uint64) string {
	return fmt.Sprintf("%s %s %s %s", op, cg, fmtU(soft), fmtU(hard))
}

func fmtU(v uint64) string {
	if v == nvml.DEVICE_MEMORY_LIMIT_MAX {
		return "max"
	}
	return strconv.FormatUint(v, 10)
}

// TestRootReservationIsZeroAfterEverySet: NVIDIA's deployment model "force
// the root reservation to 0 after every set-limits call". (1) The NVML calls
// of three hooks: every set on a container's cgroup is followed, per GPU,
// by a set of soft 0 on the named root that keeps the root's own hard
// limit (an administrator's, or none); of a container whose set one GPU
// refused, the GPU that accepted is reset, the refusing one is not. (2) On the simulated dmem backend, a container whose cgroup
// is removed without a reset (a leak) leaves its share in its pod and QoS
// ancestors, and the next container's hook leaves the root's reservation
// at 0; without the reset the root would keep the leak.
func TestRootReservationIsZeroAfterEverySet(t *testing.T) {
	t.Run("NVML calls", func(t *testing.T) {
		const mount = "/sys/fs/cgroup"
		root := mount + "/kubepods.slice"
		srv, _ := recordingServer(nvml.SUCCESS)
		var got []string
		for i, d := range srv.Devices[:2] {
			dev := d.(*server.Device)
			adminHard := uint64(0)
			if i == 1 {
				adminHard = 100 << 30 // an administrator's hard limit on the root of GPU 1
			}
			dev.GetMemoryLimits_v1Func = func(cg string) (nvml.MemoryLimits_v1, nvml.Return) {
				got = append(got, "get "+cg)
				if cg == root && adminHard != 0 {
					return nvml.MemoryLimits_v1{SoftLimit: 7 << 30, HardLimit: adminHard}, nvml.SUCCESS
				}
				return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
			}
			dev.SetMemoryLimits_v1Func = func(cg string, soft, hard uint64) nvml.Return {
				got = append(got, nvmlCall("set "+dev.UUID, cg, soft, hard))
				if soft == 3 && i == 1 { // a limit NVML refuses on GPU 1
					return nvml.ERROR_INVALID_ARGUMENT
				}
				return nvml.SUCCESS
			}
		}
		u0, u1 := srv.Devices[0].(*server.Device).UUID, srv.Devices[1].(*server.Device).UUID
		var want []string
		for i, soft := range []uint64{40 << 30, 3, 1 << 30} {
			leaf := fmt.Sprintf("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%d.slice/cri-containerd-c%d.scope", i, i)
			err := cdihook.Run(strings.NewReader(state), cdihook.Options{
				Limits:   []cdihook.Limit{{UUID: u0, Soft: soft, Hard: 60 << 30}, {UUID: u1, Soft: soft, Hard: 60 << 30}},
				ProcRoot: procTree(t, "42", "0::/"+leaf+"\n"), CgroupRoot: mount, DriverRoot: driverRoot(t), Open: opener(srv),
			})
			if (err != nil) != (soft == 3) {
				t.Fatalf("container %d: %v", i, err)
			}
			want = append(want,
				nvmlCall("set "+u0, mount+"/"+leaf, soft, 60<<30), nvmlCall("set "+u1, mount+"/"+leaf, soft, 60<<30),
				"get "+root, nvmlCall("set "+u0, root, 0, nvml.DEVICE_MEMORY_LIMIT_MAX))
			if soft != 3 {
				// GPU 1 refused container 1's limit: nothing raised its root.
				want = append(want, "get "+root, nvmlCall("set "+u1, root, 0, 100<<30))
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("NVML calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("simulated dmem after a leaked container", func(t *testing.T) {
		host := t.TempDir()
		node, err := gpusim.NewNodeWith("h200x1", "n", gpusim.NodeOptions{Enforcement: domain.EnforcementDMem})
		if err != nil {
			t.Fatal(err)
		}
		driver := filepath.Join(host, "driver")
		if _, err := gpusim.InstallDriver(driver, "usr/lib64", node.Driver); err != nil {
			t.Fatal(err)
		}
		mount := filepath.Join(host, "cgroup")
		rec := filepath.Join(host, gpusim.RecordFile)
		uuid := node.Driver.GPUs[0].UUID
		const soft = 10 << 30
		run := func(rel string) {
			t.Helper()
			if err := os.MkdirAll(filepath.Join(mount, rel), 0o755); err != nil {
				t.Fatal(err)
			}
			err := cdihook.Run(strings.NewReader(state), cdihook.Options{
				Limits:   []cdihook.Limit{{UUID: uuid, Soft: soft, Hard: 2 * soft}},
				ProcRoot: procTree(t, "42", "0::/"+rel+"\n"), CgroupRoot: mount, DriverRoot: driver,
				Open: func(path string) (purenvml.Interface, error) { return gpusim.OpenDriver(path, rec) },
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		reserved := func() map[string]uint64 {
			t.Helper()
			records, err := gpusim.ReadRecords(rec)
			if err != nil {
				t.Fatal(err)
			}
			return gpusim.Reservations(records, mount)[uuid]
		}
		root, qos := filepath.Join(mount, "kubepods"), filepath.Join(mount, "kubepods/burstable")
		run("kubepods/burstable/podA/a")
		if r := reserved(); r[root] != 0 || r[qos] != soft || r[filepath.Join(mount, "kubepods/burstable/podA/a")] != soft {
			t.Fatalf("after A: root %d, QoS %d; want root 0, QoS and leaf %d", r[root], r[qos], uint64(soft))
		}
		// A ends without a reset: its cgroup is removed, its share stays.
		for _, d := range []string{"kubepods/burstable/podA/a", "kubepods/burstable/podA"} {
			if err := os.Remove(filepath.Join(mount, d)); err != nil {
				t.Fatal(err)
			}
		}
		run("kubepods/burstable/podB/b")
		r := reserved()
		if r[root] != 0 {
			t.Errorf("after a leaked container and a new one: root %s reserves %d, want 0", root, r[root])
		}
		if r[qos] != 2*soft || r[filepath.Join(mount, "kubepods/burstable/podB/b")] != soft {
			t.Errorf("QoS %d, leaf B %d; want the leak kept below the root (%d) and B's own %d", r[qos], r[filepath.Join(mount, "kubepods/burstable/podB/b")], uint64(2*soft), uint64(soft))
		}
		// The same calls without the resets would leave the root at 20Gi.
		records, err := gpusim.ReadRecords(rec)
		if err != nil {
			t.Fatal(err)
		}
		var sets []gpusim.LimitRecord
		for _, x := range records {
			if x.Cgroup != root {
				sets = append(sets, x)
			}
		}
		if len(sets) != 2 || len(records) != 4 {
			t.Fatalf("records %+v: want set A, reset, set B, reset", records)
		}
		if got := gpusim.Reservations(sets, mount)[uuid][root]; got != 2*soft {
			t.Errorf("without the resets the root would reserve %d, want %d (the model must show the leak)", got, uint64(2*soft))
		}
	})
}

// A record directory the hook cannot use costs the record, never the
// container its limits.
func TestUnusableRecordDirStillAppliesLimits(t *testing.T) {
	srv, calls := recordingServer(nvml.SUCCESS)
	u := srv.Devices[0].(*server.Device).UUID
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := cdihook.Run(strings.NewReader(state), cdihook.Options{
		Limits: []cdihook.Limit{{UUID: u, Soft: 1, Hard: 2}}, ProcRoot: procTree(t, "42", v2Cgroup), CgroupRoot: "/sys/fs/cgroup",
		DriverRoot: driverRoot(t), Open: opener(srv), ClaimUID: "uid-1", RecordDir: filepath.Join(file, "sub", "containers"),
	})
	if err != nil || len(*calls) != 1 {
		t.Fatalf("got %v, calls %+v; want the limits applied", err, *calls)
	}
}
