// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/filewrite"
)

func ref(uid string) checkpoint.ClaimRef {
	return checkpoint.ClaimRef{Namespace: "ns", Name: "c-" + uid, UID: types.UID(uid)}
}

func pendingUIDs(c *checkpoint.Checkpoint) []string {
	var out []string
	for _, r := range c.PendingStatusClears() {
		out = append(out, string(r.UID))
	}
	return out
}

// TestStatusClearsSurviveRestart: a claim forgotten by Unprepare stays
// recorded for its status clear across a restart (and a reboot: the claim
// object outlives both) until the writer reports the clear done; a claim
// prepared again is not cleared; only adding a record writes the file.
func TestStatusClearsSurviveRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	var writes filewrite.Counter
	c, err := checkpoint.Open(ctx, path, "boot-1", checkpoint.WithCounter(&writes))
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"a", "b", "c"} {
		if err := c.Put(entry(uid, checkpoint.Completed)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path + checkpoint.StatusClearsSuffix); !os.IsNotExist(err) {
		t.Errorf("Prepare wrote the status clears file: %v", err)
	}
	if err := c.DeleteClearingStatus(ref("unknown")); err != nil {
		t.Fatal(err)
	}
	if got := pendingUIDs(c); len(got) != 0 {
		t.Errorf("a claim never prepared here is recorded: %v", got)
	}
	for _, uid := range []string{"a", "b"} {
		if err := c.DeleteClearingStatus(ref(uid)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.Get("a"); ok {
		t.Error("the claim is still prepared after DeleteClearingStatus")
	}

	restarted, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pendingUIDs(restarted), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("pending clears after a restart: %v, want %v", got, want)
	}
	if got := restarted.PendingStatusClears()[0]; got != ref("a") {
		t.Errorf("record read back as %+v", got)
	}

	// The clear of a is done; b is prepared again before its clear.
	writesBefore := writes.Writes()
	restarted.StatusCleared("a")
	if writes.Writes() != writesBefore {
		t.Error("StatusCleared wrote a file")
	}
	if err := restarted.Put(entry("b", checkpoint.Completed)); err != nil {
		t.Fatal(err)
	}
	if got := pendingUIDs(restarted); len(got) != 0 {
		t.Errorf("pending after the clear and the re-prepare: %v", got)
	}
	// The file still names a and b (nothing was added since); a restart
	// now replays a's clear once more (harmless) and ignores b, prepared.
	again, _ := checkpoint.Open(ctx, path, "boot-1")
	if got, want := pendingUIDs(again), []string{"a"}; !slices.Equal(got, want) {
		t.Errorf("after a lazy removal: %v, want %v", got, want)
	}
	// Records added later are appended; a's stays in the log until it is
	// rewritten (TestStatusClearsLogIsCompacted).
	if err := again.DeleteClearingStatus(ref("c")); err != nil {
		t.Fatal(err)
	}
	again.StatusCleared("a")
	if err := again.DeleteClearingStatus(ref("b")); err != nil {
		t.Fatal(err)
	}
	rebooted, err := checkpoint.Open(ctx, path, "boot-2")
	if err != nil {
		t.Fatal(err)
	}
	if len(rebooted.Entries()) != 0 {
		t.Errorf("entries survived a reboot: %+v", rebooted.Entries())
	}
	if got, want := pendingUIDs(rebooted), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("pending clears after a reboot: %v, want %v (the claim objects outlive the reboot)", got, want)
	}
}

// TestStatusClearsFailedWrite: a log that cannot be written does not fail
// the delete (an Unprepare the kubelet would retry forever for a hint):
// the claim is forgotten, its record kept in memory, and once the log can
// be written again the next record rewrites it whole, that one included.
func TestStatusClearsFailedWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	c, _ := checkpoint.Open(ctx, path, "boot-1")
	for _, uid := range []string{"a", "b"} {
		if err := c.Put(entry(uid, checkpoint.Completed)); err != nil {
			t.Fatal(err)
		}
	}
	// A directory with content where the file must go: the rename fails,
	// as root too.
	obstacle := path + checkpoint.StatusClearsSuffix
	if err := os.MkdirAll(filepath.Join(obstacle, "x"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteClearingStatus(ref("a")); err != nil {
		t.Fatalf("a delete failed for its hint: %v", err)
	}
	if _, ok := c.Get("a"); ok {
		t.Error("the claim is still prepared")
	}
	if got := pendingUIDs(c); !slices.Equal(got, []string{"a"}) {
		t.Errorf("pending in memory: %v, want [a]", got)
	}
	if err := os.RemoveAll(obstacle); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteClearingStatus(ref("b")); err != nil {
		t.Fatal(err)
	}
	reopened, _ := checkpoint.Open(ctx, path, "boot-1")
	if got := pendingUIDs(reopened); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("pending after a restart: %v, want [a b]: the rewrite carries the record the failed write lost", got)
	}
}

// TestStatusClearsFileIsUntrusted: the file is read at start like any
// input: what does not name a claim is dropped and reported, a damaged or
// oversized file is ignored, and the checkpoint opens either way.
func TestStatusClearsFileIsUntrusted(t *testing.T) {
	const header = "gpufrac status clears v1\n"
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"garbage", "{not json", nil},
		{"another version", "gpufrac status clears v3\n" + `{"namespace":"ns","name":"c","uid":"a"}` + "\n", nil},
		{"v2, naming the pool", "gpufrac status clears v2\n" + `{"namespace":"ns","name":"c","uid":"a","pool":"node-a"}` + "\n", []string{"a"}},
		{"v2, a pool that is no node's name", "gpufrac status clears v2\n" + `{"namespace":"ns","name":"c","uid":"a","pool":"../x"}` + "\n", nil},
		{"a line torn by a crash", header + `{"namespace":"ns","name":"c","uid":"a"}` + "\n" + `{"namespace":"ns","na`, []string{"a"}},
		{"a uid that climbs out", header + `{"namespace":"ns","name":"c","uid":"../../etc"}` + "\n" + `{"namespace":"ns","name":"c","uid":"ok"}` + "\n", []string{"ok"}},
		{"a namespace with a slash", header + `{"namespace":"ns/x","name":"c","uid":"a"}` + "\n", nil},
		{"an empty name", header + `{"namespace":"ns","name":"","uid":"a"}` + "\n", nil},
		{"escape sequences", header + "{\"namespace\":\"ns\",\"name\":\"\\u001b]0;x\\u0007\",\"uid\":\"a\"}\n", nil},
		{"oversized", header + strings.Repeat(`{"namespace":"ns","name":"c","uid":"a"}`+"\n", 120000), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if err := os.WriteFile(path+checkpoint.StatusClearsSuffix, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := checkpoint.Open(ctx, path, "boot-1")
			if err != nil {
				t.Fatalf("a bad status clears file stopped the checkpoint from opening: %v", err)
			}
			if got := pendingUIDs(c); !slices.Equal(got, tc.want) {
				t.Errorf("pending %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStatusClearsLogIsCompacted: Unprepare appends one line; records
// cleared since are dropped when the log holds twice as many lines as
// records pending, so it stays small however many claims come and go.
func TestStatusClearsLogIsCompacted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	c, _ := checkpoint.Open(ctx, path, "boot-1")
	lines := func() int {
		raw, err := os.ReadFile(path + checkpoint.StatusClearsSuffix)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(raw), "\n")
	}
	maxLines := 0
	for i := range 1000 {
		uid := fmt.Sprintf("u%d", i)
		if err := c.Put(entry(uid, checkpoint.Completed)); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteClearingStatus(ref(uid)); err != nil {
			t.Fatal(err)
		}
		// The clear of the claim before is done by now.
		if i > 0 {
			c.StatusCleared(types.UID(fmt.Sprintf("u%d", i-1)))
		}
		maxLines = max(maxLines, lines())
	}
	if maxLines > 2*2+64+1 {
		t.Errorf("the log grew to %d lines with at most two records pending", maxLines)
	}
	reopened, _ := checkpoint.Open(ctx, path, "boot-1")
	if got := pendingUIDs(reopened); !slices.Contains(got, "u999") || len(got) > 66 {
		t.Errorf("pending after a restart: %d records (%v...), want u999 and at most the lines since the last rewrite", len(got), got[:min(len(got), 3)])
	}
}
