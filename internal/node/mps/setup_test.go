// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

// testNode is the set-up the manager tests share: a context carrying the
// test's logger that ends when the test does, before its cleanups (as a
// deferred cancel would), a fake API server, and a root for the daemons'
// directories. The root is made here, before any kubelet stand-in the
// test starts: the stand-in must have stopped writing into it before it
// is removed (kubeletApplying).
func testNode(t *testing.T) (context.Context, *fake.Clientset, string) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	return klog.NewContext(t.Context(), logger), fake.NewClientset(), t.TempDir()
}

// managerWith is a manager of legacy MPS daemons on node over client,
// with edit's changes to its configuration.
func managerWith(t *testing.T, client *fake.Clientset, edit func(*mps.Config)) *mps.Manager {
	t.Helper()
	cfg := mps.Config{
		Client: client, Namespace: ns, NodeName: node, Template: templates.MPSControlDaemon,
		Image: "gpufrac/gpufrac:test", DriverRoot: "/run/nvidia/driver", Version: domain.MPSVersionLegacy, ReadyTimeout: 10 * time.Second,
	}
	edit(&cfg)
	m, err := mps.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newManager(t *testing.T, client *fake.Clientset, timeout time.Duration, ev mps.Events) *mps.Manager {
	t.Helper()
	return managerWith(t, client, func(c *mps.Config) { c.ReadyTimeout, c.Events = timeout, ev })
}

// v3Manager is a manager of MPS v3 daemons (a namespace per claim) on a
// 615 driver; memoryMiB is each GPU's memory, where a test needs it.
func v3Manager(t *testing.T, client *fake.Clientset, timeout time.Duration, memoryMiB map[string]int64) *mps.Manager {
	t.Helper()
	return managerWith(t, client, func(c *mps.Config) {
		c.Version, c.DriverVersion, c.ReadyTimeout, c.GPUMemoryMiB = domain.MPSVersionV3, "615.23.01", timeout, memoryMiB
	})
}
