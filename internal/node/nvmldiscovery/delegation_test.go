// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nvmldiscovery_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// cgroupTree writes a cgroup v2 tree: each entry is a cgroup (relative,
// "." the root) and what its cgroup.subtree_control holds.
func cgroupTree(t *testing.T, tree map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory dmem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for cg, ctl := range tree {
		if err := os.MkdirAll(filepath.Join(root, cg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, cg, "cgroup.subtree_control"), []byte(ctl+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The walk reads cgroup.subtree_control from the root down the kubelet's
// pod tree (systemd and cgroupfs names) and names the first cgroup that
// does not enable dmem; "dmemx" is not "dmem".
func TestDmemUndelegated(t *testing.T) {
	all := "cpu memory dmem"
	for _, tc := range []struct {
		name string
		tree map[string]string
		want string
	}{
		{"delegated all the way down (systemd)", map[string]string{".": all, "kubepods.slice": all, "kubepods.slice/kubepods-burstable.slice": all,
			"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice": all, "kubepods.slice/kubepods-pod2.slice": all}, ""},
		{"not at the root", map[string]string{".": "cpu memory", "kubepods.slice": all}, "."},
		{"not at kubepods", map[string]string{".": all, "kubepods": "cpu memory dmemx"}, "kubepods"},
		{"not at a QoS class", map[string]string{".": all, "kubepods": all, "kubepods/besteffort": "memory", "kubepods/burstable": all}, "kubepods/besteffort"},
		{"not at a pod", map[string]string{".": all, "kubepods": all, "kubepods/burstable": all, "kubepods/burstable/podA": "cpu"}, "kubepods/burstable/podA"},
		{"no kubelet tree: the root alone", map[string]string{".": all, "system.slice": "cpu"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nvmldiscovery.DmemUndelegated(cgroupTree(t, tc.tree))
			if err != nil || got != tc.want {
				t.Errorf("got %q %v, want %q", got, err, tc.want)
			}
		})
	}
	if _, err := nvmldiscovery.DmemUndelegated(t.TempDir()); err == nil || !strings.Contains(err.Error(), "reading which controllers") {
		t.Errorf("a root without cgroup.subtree_control: %v, want an error", err)
	}
}

// An r615 node on cgroup v2 whose pod tree does not delegate dmem offers
// what it can enforce (mps with MPS, none without) and says why.
func TestDiscoverWithoutDmemDelegation(t *testing.T) {
	for _, tc := range []struct {
		mps  bool
		want domain.Enforcement
	}{{true, domain.EnforcementMPS}, {false, domain.EnforcementNone}} {
		_, ctx := ktesting.NewTestContext(t)
		opts := nvmldiscovery.Options{LookPath: notFound,
			CgroupRoot: cgroupTree(t, map[string]string{".": "cpu memory dmem", "kubepods.slice": "cpu memory"})}
		if tc.mps {
			opts.LookPath = found
		}
		inv, err := nvmldiscovery.Discover(ctx, dgxh200.New(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if inv.Enforcement != tc.want || inv.EnforcementNote != nvmldiscovery.DmemNotDelegatedNote("kubepods.slice") {
			t.Errorf("mps %v: %s %q, want %s and the missing level named", tc.mps, inv.Enforcement, inv.EnforcementNote, tc.want)
		}
	}
	// The seam a simulated node uses replaces the walk, errors included.
	_, ctx := ktesting.NewTestContext(t)
	inv, err := nvmldiscovery.Discover(ctx, dgxh200.New(), nvmldiscovery.Options{LookPath: found, CgroupV2: func() bool { return true },
		DmemUndelegated: func() (string, error) { return "", errors.New("permission denied") }})
	if err != nil || inv.Enforcement != domain.EnforcementMPS || !strings.Contains(inv.EnforcementNote, "permission denied") {
		t.Errorf("unreadable delegation: %v %s %q", err, inv.Enforcement, inv.EnforcementNote)
	}
}
