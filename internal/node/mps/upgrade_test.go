// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/mps"
)

// TestUpgradeKeepsTheRunningDaemon: a plugin of a new version (a new image
// in its --mps-daemon-image) finds the daemon Pod the old one started and
// uses it as it is: the daemon's MPS binaries are the driver root's, so a
// new plugin image changes nothing the daemon runs, and restarting it
// would cut every client off its server. Only a daemon that died is
// recreated (with the new image).
func TestUpgradeKeepsTheRunningDaemon(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	old := newManager(t, client, 10*time.Second, nil)
	first := smClaim(root, "first", "GPU-a", 24)
	if err := old.Acquire(ctx, *first.MPS(), first); err != nil {
		t.Fatal(err)
	}
	before := daemonPods(t, client)
	if len(before) != 1 || before[0].Spec.Containers[0].Image != "gpufrac/gpufrac:test" {
		t.Fatalf("daemon pods before the upgrade: %d, image %q", len(before), before[0].Spec.Containers[0].Image)
	}

	upgraded := managerWith(t, client, func(c *mps.Config) { c.Image = "gpufrac/gpufrac:next" })
	second := smClaim(root, "second", "GPU-a", 40)
	if err := upgraded.Restore(ctx, []plan.Claim{*first}); err != nil {
		t.Fatal(err)
	}
	if err := upgraded.Acquire(context.WithoutCancel(ctx), *second.MPS(), second); err != nil {
		t.Fatal(err)
	}
	after := daemonPods(t, client)
	if len(after) != 1 || after[0].UID != before[0].UID || after[0].Spec.Containers[0].Image != "gpufrac/gpufrac:test" {
		t.Errorf("the upgraded plugin replaced the running daemon: %d pods, uid %s (was %s), image %q",
			len(after), after[0].UID, before[0].UID, after[0].Spec.Containers[0].Image)
	}
	if got := ceiling(t, second.MPS()); got != "40960" {
		t.Errorf("the kept daemon was not given the new claim's settings: ceiling %s MiB, want 40960", got)
	}
}
