// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
)

func refOf(c *resourceapi.ResourceClaim) kubeletplugin.NamespacedObject {
	return kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}
}

// TestRecoverClearsStatusTheLastProcessDidNot: a plugin killed after
// Unprepare returned but before its clearing status write (held back by
// the clear delay, or still queued) left the claim Ready in the API; the
// kubelet will not call Unprepare again, so the restarted plugin clears it
// from the checkpoint's record. A clear reported written may be replayed
// until the log is rewritten (it then finds nothing to clear), and a
// claim prepared again is written, not cleared.
func TestRecoverClearsStatusTheLastProcessDidNot(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	done := allocated("done", "gpu-0", "s1", "10Gi", "")
	killed := allocated("killed", "gpu-0", "s2", "10Gi", "")
	again := allocated("again", "gpu-1", "s3", "10Gi", "")
	for _, c := range []*resourceapi.ResourceClaim{done, killed, again} {
		if _, err := e.preparer.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*resourceapi.ResourceClaim{done, again, killed} {
		if err := e.preparer.Unprepare(ctx, refOf(c)); err != nil {
			t.Fatal(err)
		}
	}
	// The writer reports done's clear written; killed's never is.
	e.ckpt.StatusCleared(done.UID)
	e.restart()
	// The file was last written with killed's record, when done's and
	// again's were still pending: all three are replayed (done's finds
	// nothing to clear in the API).
	if got, want := e.status.unprepared, []types.UID{again.UID, done.UID, killed.UID}; !reflect.DeepEqual(got, want) {
		t.Errorf("cleared at start: %v, want %v", got, want)
	}
	// Now: again prepared again, the rest reported cleared, one more
	// unprepared.
	if _, err := e.preparer.Prepare(ctx, again); err != nil {
		t.Fatal(err)
	}
	e.ckpt.StatusCleared(done.UID)
	e.ckpt.StatusCleared(killed.UID)
	other := allocated("other", "gpu-1", "s4", "10Gi", "")
	if _, err := e.preparer.Prepare(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := e.preparer.Unprepare(ctx, refOf(other)); err != nil {
		t.Fatal(err)
	}
	e.restart()
	// done and killed are still in the log (appended to, not rewritten):
	// their clears are replayed and find nothing. again is not cleared.
	if got, want := e.status.unprepared, []types.UID{done.UID, killed.UID, other.UID}; !reflect.DeepEqual(got, want) {
		t.Errorf("cleared at the second start: %v, want %v", got, want)
	}
	if got, want := e.status.restored, []types.UID{again.UID}; !reflect.DeepEqual(got, want) {
		t.Errorf("status restored for %v, want the prepared claim %v", got, want)
	}
}

// TestRecoverRewritesAMissingSpec: a CDI spec missing under a completed
// entry (the CDI root is often a tmpfs) is written again at start, the
// same as before, with an Event; without it a container of the claim that
// restarts could not be created.
func TestRecoverRewritesAMissingSpec(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	lost := allocated("lost", "gpu-0", "s1", "10Gi", "")
	kept := allocated("kept", "gpu-1", "s2", "10Gi", "")
	for _, c := range []*resourceapi.ResourceClaim{lost, kept} {
		if _, err := e.preparer.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	spec := filepath.Join(e.cdiDir, cdispec.SpecName(lost.UID))
	before, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	e.restart()
	after, err := os.ReadFile(spec)
	if err != nil {
		t.Fatalf("the missing spec was not written again: %v", err)
	}
	if string(after) != string(before) {
		t.Errorf("spec written again differs:\n%s\nwant\n%s", after, before)
	}
	if len(e.events.events) != 1 || !strings.HasPrefix(e.events.events[0], "lost: CDISpecRestored "+spec) {
		t.Errorf("events %v, want one CDISpecRestored for the lost claim", e.events.events)
	}
	if got := e.cdiFiles(); !slices.Equal(got, []string{cdispec.SpecName(kept.UID), cdispec.SpecName(lost.UID)}) &&
		!slices.Equal(got, []string{cdispec.SpecName(lost.UID), cdispec.SpecName(kept.UID)}) {
		t.Errorf("CDI files %v", got)
	}
	if got := e.status.restored; len(got) != 2 {
		t.Errorf("status restored for %v, want both prepared claims", got)
	}
	if entry, ok := e.ckpt.Get(lost.UID); !ok || entry.State != checkpoint.Completed {
		t.Errorf("entry after the restore: %+v, %v", entry, ok)
	}
}
