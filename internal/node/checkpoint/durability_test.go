// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/filewrite"
)

// A claim's records cost one file write each and no fsync; only the boot
// marker, once per boot, is fsynced (docs/reliability.md).
func TestWritesAndFsyncsPerChange(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	var counter filewrite.Counter
	c, err := checkpoint.Open(ctx, path, "boot-1", checkpoint.WithCounter(&counter))
	if err != nil {
		t.Fatal(err)
	}
	if counter.Writes() != 1 || counter.Fsyncs() != 2 {
		t.Fatalf("opening in a new boot: %d writes, %d fsyncs; want the boot marker's 1 write, 2 fsyncs", counter.Writes(), counter.Fsyncs())
	}
	for _, e := range []checkpoint.Entry{entry("a", checkpoint.Started), entry("a", checkpoint.Completed)} {
		if err := c.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if counter.Writes() != 4 || counter.Fsyncs() != 2 {
		t.Errorf("after Started, Completed, Delete: %d writes, %d fsyncs; want 4 and 2", counter.Writes(), counter.Fsyncs())
	}
	var again filewrite.Counter
	if _, err := checkpoint.Open(ctx, path, "boot-1", checkpoint.WithCounter(&again)); err != nil {
		t.Fatal(err)
	}
	if again.Writes() != 0 || again.Fsyncs() != 0 {
		t.Errorf("reopening in the same boot wrote %d files, %d fsyncs; want none", again.Writes(), again.Fsyncs())
	}
}

// An unreadable checkpoint is void when the boot marker shows it was last
// written in another boot (a power loss may tear the unsynced file), and
// suspect (Unreadable, nothing removed) when it was written in this boot or
// no marker says when.
func TestUnreadableCheckpointAndBootMarker(t *testing.T) {
	for _, tc := range []struct {
		name           string
		marker         string // "" removes the marker
		wantUnreadable bool
	}{
		{name: "torn in an earlier boot", marker: "boot-1", wantUnreadable: false},
		{name: "damaged in this boot", marker: "boot-2", wantUnreadable: true},
		{name: "no marker (an earlier release wrote it)", marker: "", wantUnreadable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			c, err := checkpoint.Open(ctx, path, "boot-1")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Put(entry("a", checkpoint.Completed)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, nil, 0o600); err != nil { // torn: empty
				t.Fatal(err)
			}
			if tc.marker == "" {
				if err := os.Remove(path + checkpoint.BootMarkerSuffix); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path+checkpoint.BootMarkerSuffix, []byte(tc.marker+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			after, err := checkpoint.Open(ctx, path, "boot-2")
			if err != nil {
				t.Fatal(err)
			}
			if got := after.Unreadable() != ""; got != tc.wantUnreadable {
				t.Errorf("Unreadable() = %q, want unreadable %v", after.Unreadable(), tc.wantUnreadable)
			}
			if len(after.Entries()) != 0 {
				t.Error("entries read from a torn checkpoint")
			}
			if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
				t.Errorf("the torn file was not kept for inspection: %v", aside)
			}
			marker, _ := os.ReadFile(path + checkpoint.BootMarkerSuffix)
			if string(marker) != "boot-2\n" {
				t.Errorf("boot marker %q after Open, want this boot's", marker)
			}
		})
	}
}
