// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// InstanceLockFile is the lock, under the plugin data directory, that one
// plugin instance holds while it owns the node's state (checkpoint, CDI
// specs, MPS daemons).
//
// During a rolling update (Config.RollingUpdateUID) the kubelet may talk to
// the old and the new instance at once, and the helper's cross-instance
// serialisation is off (Serialize(false)). This plugin keeps its prepared
// claims in memory between calls, so two instances must never both act: the
// new one registers at once, so that the kubelet always has an instance to
// call, but its calls wait until the old instance has exited and released
// this lock, and only then does it load the checkpoint.
const InstanceLockFile = "instance.lock"

// lockPoll is how often a waiting instance retries the lock; the old
// instance's exit is not signalled any other way.
const lockPoll = 100 * time.Millisecond

// lockInstance takes the instance lock, waiting for a previous instance to
// release it (at the latest when its process exits, which the kernel
// guarantees even after SIGKILL), or until ctx ends.
func lockInstance(ctx context.Context, dir string) (*os.File, error) {
	path := filepath.Join(dir, InstanceLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the instance lock %s: %w", path, err)
	}
	start, logged := time.Now(), false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if logged {
				klog.FromContext(ctx).Info("Previous plugin instance has exited; taking over", "waited", time.Since(start).Round(time.Millisecond))
			}
			return f, nil
		}
		if err != unix.EWOULDBLOCK {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !logged {
			klog.FromContext(ctx).Info("Another plugin instance owns this node's state; waiting for it to exit", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the previous plugin instance to release %s: %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}

// waitReady blocks a kubelet call until this instance owns the node's
// state; see InstanceLockFile.
func (p *Plugin) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the plugin is still waiting for its previous instance to exit: %w", context.Cause(ctx))
	}
}
