// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func entry(uid string, state checkpoint.State) checkpoint.Entry {
	return checkpoint.Entry{State: state, Plan: plan.Claim{UID: types.UID(uid), Namespace: "ns", Name: "c-" + uid,
		Devices: []plan.Device{{Request: "gpu", Pool: "n", Device: "gpu-0", GPU: domain.GPU{UUID: "GPU-0"},
			SoftLimitBytes: 1 << 30, HardLimitBytes: 2 << 30, ComputeMode: v1alpha1.TimeSlicing, Enforcement: domain.EnforcementDMem}}}}
}

func TestSurvivesRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	c, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []checkpoint.Entry{entry("a", checkpoint.Started), entry("b", checkpoint.Completed), entry("a", checkpoint.Completed)} {
		if err := c.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete("zzz"); err != nil {
		t.Errorf("deleting an unknown claim: %v", err)
	}
	reopened, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	got := reopened.Entries()
	if len(got) != 2 || got[0].Plan.UID != "a" || got[0].State != checkpoint.Completed || got[1].Plan.UID != "b" {
		t.Fatalf("entries after restart: %+v", got)
	}
	if got[0].Plan.Devices[0].HardLimitBytes != 2<<30 {
		t.Errorf("plan not preserved: %+v", got[0].Plan)
	}
	if err := reopened.Delete("a"); err != nil {
		t.Fatal(err)
	}
	again, _ := checkpoint.Open(ctx, path, "boot-1")
	if _, ok := again.Get("a"); ok {
		t.Error("deleted claim came back")
	}
	leftovers, _ := filepath.Glob(path + ".tmp-*")
	if len(leftovers) > 0 {
		t.Errorf("temp files left behind: %v", leftovers)
	}
}

func TestRebootInvalidates(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	c, _ := checkpoint.Open(ctx, path, "boot-1")
	if err := c.Put(entry("a", checkpoint.Completed)); err != nil {
		t.Fatal(err)
	}
	after, err := checkpoint.Open(ctx, path, "boot-2")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Entries()); n != 0 {
		t.Errorf("%d entries survived a reboot", n)
	}
}

func TestCorruptCheckpointIsMovedAsideNotLost(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	c, _ := checkpoint.Open(ctx, path, "boot-1")
	if err := c.Put(entry("a", checkpoint.Completed)); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	torn := bytes.Replace(raw, []byte(`"c-a"`), []byte(`"c-X"`), 1)
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.Decode(torn); err == nil || !strings.Contains(err.Error(), "does not match its data") {
		t.Errorf("Decode of an edited checkpoint: %v", err)
	}
	fresh, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(fresh.Entries()) != 0 {
		t.Error("entries read from a corrupt checkpoint")
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt checkpoint not kept for inspection: %v", aside)
	}
	kept, _ := os.ReadFile(aside[0])
	if !bytes.Equal(kept, torn) {
		t.Error("the file moved aside differs from the corrupt one")
	}
}

func TestDecodeRejects(t *testing.T) {
	good, err := checkpoint.Encode("b", map[types.UID]checkpoint.Entry{"a": entry("a", checkpoint.Started)})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		raw  string
		want string
	}{
		"future version": {strings.Replace(string(good), `"version":1`, `"version":2`, 1), "checkpoint version 2 was written by a later release; this plugin reads versions 1 to 1"},
		"no version":     {strings.Replace(string(good), `"version":1,`, ``, 1), "checkpoint version 0 is unknown"},
		"truncated":      {string(good[:len(good)/2]), "decoding checkpoint"},
	} {
		if _, err := checkpoint.Decode([]byte(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
	d, err := checkpoint.Decode(good)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := checkpoint.Encode(d.BootID, d.Claims)
	if !bytes.Equal(again, good) {
		t.Errorf("re-encoding changed the bytes:\n%s\n%s", good, again)
	}
}

func TestConcurrentPutsNeverTear(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	c, _ := checkpoint.Open(ctx, path, "boot-1")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := string(rune('a' + i))
			if err := c.Put(entry(uid, checkpoint.Completed)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	reopened, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reopened.Entries()); n != 20 {
		t.Errorf("%d entries on disk, want 20", n)
	}
}

func TestFailedWriteDoesNotRunAhead(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "checkpoint.json")
	c, _ := checkpoint.Open(ctx, path, "boot-1")
	if err := c.Put(entry("a", checkpoint.Completed)); err != nil {
		t.Fatal(err)
	}
	// Make the directory unwritable (and the test not root-dependent: a
	// file where the temp file must go).
	if err := os.Chmod(filepath.Dir(path), 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(filepath.Dir(path), 0o750) }()
	if os.Geteuid() == 0 {
		t.Log("running as root: permissions do not stop writes; replacing the directory by a file instead")
		_ = os.Chmod(filepath.Dir(path), 0o750)
		if err := os.RemoveAll(filepath.Dir(path)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Dir(path), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.Remove(filepath.Dir(path)) }()
	}
	if err := c.Put(entry("b", checkpoint.Started)); err == nil {
		t.Fatal("a write that cannot reach disk succeeded")
	}
	if _, ok := c.Get("b"); ok {
		t.Error("an entry that never reached disk is visible")
	}
	if err := c.Delete("a"); err == nil {
		t.Fatal("a delete that cannot reach disk succeeded")
	}
	if _, ok := c.Get("a"); !ok {
		t.Error("a delete that never reached disk took effect in memory")
	}
}
