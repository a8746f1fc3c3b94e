// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// writtenByThisRelease is a checkpoint with one claim of every kind, as
// this release writes it.
func writtenByThisRelease(t *testing.T) (path string, want []checkpoint.Entry) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	path = filepath.Join(t.TempDir(), "checkpoint.json")
	c, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	threads := int32(30)
	share := types.UID("share-1")
	sm := entry("sm", checkpoint.Completed)
	sm.Plan.Devices[0].ComputeMode = v1alpha1.SMSharing
	sm.Plan.Devices[0].Enforcement = domain.EnforcementMPS
	sm.Plan.Devices[0].ActiveThreadPercentage = &threads
	b := mpslayout.For("/run/mps", "GPU-0")
	b.Version, b.Namespace = domain.MPSVersionV3, mpslayout.NamespaceFor("sm")
	sm.Plan.Devices[0].MPS = b
	ts := entry("ts", checkpoint.Completed)
	ts.Plan.Devices[0].ShareID = &share
	want = []checkpoint.Entry{entry("half", checkpoint.Started), sm, ts}
	for _, e := range want {
		if err := c.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	return path, want
}

// TestCheckpointReadByPreviousVersion: the plugins a rollback can bring
// back read what this release and later schema versions write, and keep
// every prepared claim.
func TestCheckpointReadByPreviousVersion(t *testing.T) {
	path, want := writtenByThisRelease(t)
	ours, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("first tolerant release reads this release", func(t *testing.T) {
		claims, quarantined, err := frozenV1Decode(ours)
		if err != nil {
			t.Fatal(err)
		}
		if len(quarantined) != 0 {
			t.Errorf("quarantined: %v", quarantined)
		}
		checkFrozenClaims(t, claims, want)
	})

	t.Run("first tolerant release reads a later schema", func(t *testing.T) {
		claims, quarantined, err := frozenV1Decode(readGolden(t, "v1-later-schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for uid, e := range claims {
			kept = append(kept, uid+"="+e.State)
		}
		slices.Sort(kept)
		if want := []string{"uid-sm=Completed", "uid-started=Started", "uid-ts=Completed"}; !slices.Equal(kept, want) {
			t.Errorf("kept %v, want every prepared claim %v", kept, want)
		}
		if sm := claims["uid-sm"]; len(sm.Plan.Devices) != 1 || sm.Plan.Devices[0].MPS == nil || sm.Plan.Devices[0].MPS.Namespace != "c85d58aea80bf10a5" {
			t.Errorf("the SMSharing claim lost its MPS binding: %+v", sm.Plan)
		}
		var q []string
		for uid := range quarantined {
			q = append(q, uid)
		}
		slices.Sort(q)
		if want := []string{"uid-mig", "uid-unpreparing"}; !slices.Equal(q, want) {
			t.Errorf("quarantined %v, want %v (a state and a compute mode it does not know)", q, want)
		}
	})

	t.Run("strict release reads this release", func(t *testing.T) {
		// The releases before the tolerant decoder refuse unknown fields:
		// they read this release's files because version 1 has added none
		// yet. The first field added moves the rollback floor up to the
		// first tolerant release (docs/operations.md).
		claims, err := frozenStrictDecode(ours)
		if err != nil {
			t.Fatal(err)
		}
		checkFrozenClaims(t, claims, want)
	})

	t.Run("this release reads the strict release", func(t *testing.T) {
		d, err := checkpoint.Decode(readGolden(t, "v1-strict-release.json"))
		if err != nil {
			t.Fatal(err)
		}
		sm := d.Claims["uid-sm"].Plan.Devices[0]
		if len(d.Claims) != 3 || sm.GPU.UUID != "GPU-3f1c2d4e-aaaa-bbbb-cccc-000000000001" || sm.GPU.MemoryBytes != 150754820096 || sm.MPS.Version != domain.MPSVersionV3 || *sm.ActiveThreadPercentage != 40 {
			t.Errorf("converted claims: %+v", d.Claims)
		}
	})

	t.Run("a rollback and roll forward keep the later fields", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		p := filepath.Join(t.TempDir(), "checkpoint.json")
		later := readGolden(t, "v1-later-schema.json")
		if err := os.WriteFile(p, later, 0o600); err != nil {
			t.Fatal(err)
		}
		d, _ := checkpoint.Decode(later)
		c, err := checkpoint.Open(ctx, p, d.BootID)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Put(entry("new", checkpoint.Completed)); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(p)
		if n := strings.Count(string(after), `"preparedAt":"2027-03-01T10:00:00Z"`); n != 5 {
			t.Errorf("%d of 5 entries kept the later release's field after a rewrite", n)
		}
		if !strings.Contains(string(after), `"state":"Unpreparing"`) {
			t.Error("a quarantined entry was not written back")
		}
	})
}

func checkFrozenClaims(t *testing.T, got map[string]frozenV1Entry, want []checkpoint.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d claims, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[string(w.Plan.UID)]
		if !ok {
			t.Errorf("claim %s lost", w.Plan.UID)
			continue
		}
		wd, gd := w.Plan.Devices[0], g.Plan.Devices[0]
		if g.State != string(w.State) || g.Plan.Name != w.Plan.Name || gd.GPU.UUID != wd.GPU.UUID || gd.HardLimitBytes != wd.HardLimitBytes ||
			gd.ComputeMode != string(wd.ComputeMode) || (wd.MPS == nil) != (gd.MPS == nil) || (wd.ShareID == nil) != (gd.ShareID == nil) {
			t.Errorf("claim %s read as %+v, want %+v", w.Plan.UID, g, w)
		}
		if wd.MPS != nil && (gd.MPS.PipeDir != wd.MPS.PipeDir || gd.MPS.Namespace != wd.MPS.Namespace) {
			t.Errorf("claim %s MPS binding read as %+v", w.Plan.UID, gd.MPS)
		}
	}
}
