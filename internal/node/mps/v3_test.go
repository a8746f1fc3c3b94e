// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func v3Claim(root, name, gpu string, hardGiB int64, threads *int32) *plan.Claim {
	c := smClaim(root, name, gpu, hardGiB)
	c.Devices[0].MPS.Version = domain.MPSVersionV3
	c.Devices[0].MPS.Namespace = mpslayout.NamespaceFor(c.UID)
	c.Devices[0].ActiveThreadPercentage = threads
	return c
}

func namespaces(t *testing.T, b *mpslayout.Binding) string {
	raw, err := os.ReadFile(filepath.Join(mps.ConfigDir(*b), mps.NamespacesFile))
	if err != nil {
		return "<none>"
	}
	return string(raw)
}

// On MPS v3 every SMSharing claim of a GPU gets its own namespace on the
// one shared server, with its own limit and thread percentage, instead of
// the legacy daemon's single ceiling.
func TestV3NamespacePerClaim(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	m := v3Manager(t, client, 10*time.Second, nil)
	first := v3Claim(root, "first", "GPU-a", 24, nil)
	second := v3Claim(root, "second", "GPU-a", 40, ptr.To[int32](30))
	b := first.MPS()
	for _, c := range []*plan.Claim{first, second} {
		if err := m.Acquire(ctx, *c.MPS(), c); err != nil {
			t.Fatal(err)
		}
	}
	pods := daemonPods(t, client)
	if len(pods) != 1 {
		t.Fatalf("%d daemon pods, want one shared server", len(pods))
	}
	if got := pods[0].Spec.InitContainers[0].Command; !strings.HasSuffix(strings.Join(got, " "), " -- nvidia-smi -i GPU-a -c DEFAULT") || got[0] != "/usr/local/bin/gpufrac-mps-launcher" {
		t.Errorf("v3 init container %q, want the driver root's nvidia-smi setting the DEFAULT compute mode, through the launcher", got)
	}
	nsFirst, nsSecond := mpslayout.NamespaceFor(first.UID), mpslayout.NamespaceFor(second.UID)
	want := nsFirst + " 24576 100\n" + nsSecond + " 40960 30\n"
	if nsSecond < nsFirst {
		want = nsSecond + " 40960 30\n" + nsFirst + " 24576 100\n"
	}
	if got := namespaces(t, b); got != want {
		t.Errorf("namespaces %q, want %q", got, want)
	}
	if err := m.Release(ctx, *b, first.UID); err != nil {
		t.Fatal(err)
	}
	if got, want := namespaces(t, b), nsSecond+" 40960 30\n"; got != want {
		t.Errorf("namespaces after release %q, want %q", got, want)
	}
	if err := m.Release(ctx, *b, second.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(daemonPods(t, client)); n != 0 {
		t.Errorf("%d daemon pods after the last release", n)
	}
}

// A daemon that is Ready but never applies a new claim's settings fails
// that claim's Prepare, naming the daemon and what it still has, rather
// than letting a container start before its namespace exists.
func TestSettingsNeverAppliedFailsPrepare(t *testing.T) {
	ctx, client, dir := testNode(t)
	kubeletApplying(ctx, t, client, true, false) // Ready, but deaf to the config directory
	m := v3Manager(t, client, 300*time.Millisecond, nil)
	c := v3Claim(dir, "c", "GPU-a", 8, nil)
	err := m.Acquire(ctx, *c.MPS(), c)
	if err == nil {
		t.Fatal("Acquire succeeded though the daemon never created the namespace")
	}
	for _, want := range []string{mps.PodName(node, "GPU-a"), "did not apply its settings", mpslayout.NamespaceFor(c.UID) + " 8192 100"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if len(m.Users()) != 0 || len(daemonPods(t, client)) != 0 {
		t.Errorf("left behind: users %v, %d daemon pods", m.Users(), len(daemonPods(t, client)))
	}
}
