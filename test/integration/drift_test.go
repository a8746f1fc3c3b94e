// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
)

// TestNoDriftAfterAKill: a plugin SIGKILLed after Unprepare returned but
// before its clearing status write (held back here by a long clear delay,
// 1 s by default) cannot leave a claim that outlives its pod (created by a
// user, not from a template) showing Ready for good: once its last pod is
// gone the resourceclaim controller deallocates it, and kube-apiserver
// drops the status.devices entries of deallocated devices itself
// (dropDeallocatedStatusDevices in pkg/registry/resource/resourceclaim,
// docs/reliability.md). The restarted plugin's replay of the clear it
// recorded then finds nothing to write. (The window the record closes, a
// claim still allocated, is pinned in internal/node/preparer and
// claimstatus.) In the same restart the CDI spec of a claim still
// prepared, removed meanwhile (the CDI root is often a tmpfs), is written
// again with a CDISpecRestored Event, and that claim's status is kept.
func TestNoDriftAfterAKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.nodeWith(harness.NodeOptions{GPUs: "h200x2", PluginArgs: []string{"--status-clear-delay=10m"}})
	class := e.classFor("drift", "")
	tmpl := claimTemplate("drift", class, "10Gi", 1, "")
	e.createTemplate(tmpl)
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: e.ns}, Spec: tmpl.Spec.Spec}
	shared, err := e.client.ResourceV1().ResourceClaims(e.ns).Create(e.ctx, shared, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.createPodWithClaim("user", shared.Name, node.Name)
	e.createPod("keeper", "drift", node.Name)
	e.waitRunning("user")
	keeperClaim := e.claimOf(e.waitRunning("keeper"))
	e.poll("the shared claim's status to say Ready", func() (bool, error) {
		n, err := e.ourStatusEntries(shared.Name)
		return n == 1, err
	})

	e.deletePod("user")
	sharedSpec := filepath.Join(node.CDIRoot, cdispec.SpecName(shared.UID))
	e.poll("the shared claim to be unprepared", func() (bool, error) {
		_, err := os.Stat(sharedSpec)
		return errors.Is(err, os.ErrNotExist), nil
	})
	// The resourceclaim controller deallocates, then removes its finalizer
	// in a second write: wait for both, so that the resourceVersion taken
	// below changes only if something writes the claim after that.
	e.poll("kube-apiserver to drop the status of the deallocated claim, with the plugin's clear held back", func() (bool, error) {
		c, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, shared.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n, err := e.ourStatusEntries(shared.Name)
		return c.Status.Allocation == nil && len(c.Finalizers) == 0 && n == 0, err
	})
	updatesBefore := e.claimResourceVersion(shared.Name)
	keeperSpec := filepath.Join(node.CDIRoot, cdispec.SpecName(keeperClaim.UID))
	before, err := os.ReadFile(keeperSpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keeperSpec); err != nil {
		t.Fatal(err)
	}

	if err := node.KillPlugin(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := node.RestartPlugin(e.ctx, ""); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(keeperSpec)
	if err != nil {
		t.Fatalf("the keeper's CDI spec was not written again at start: %v", err)
	}
	if string(after) != string(before) {
		t.Errorf("the CDI spec written again differs:\n%s\nwant\n%s", after, before)
	}
	e.poll("a CDISpecRestored Event on the keeper's claim", func() (bool, error) {
		list, err := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + keeperClaim.Name + ",reason=CDISpecRestored"})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 1, nil
	})
	if n, err := e.ourStatusEntries(keeperClaim.Name); err != nil || n != 1 {
		t.Errorf("the keeper's claim has %d status entries of %s after the restart (%v), want its one Ready entry kept", n, driver, err)
	}
	if !running(e.pod("keeper")) {
		t.Error("the keeper pod is no longer running")
	}
	// The record survived the SIGKILL: the restarted plugin replayed the
	// clear, which found the claim deallocated and wrote nothing.
	log, err := os.ReadFile(node.PluginLog())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte(`"Clearing the status of a claim no longer prepared here" claim="`+e.ns+`/shared"`)) {
		t.Error("the restarted plugin did not replay the clear it recorded for the shared claim")
	}
	if n, err := e.ourStatusEntries(shared.Name); err != nil || n != 0 {
		t.Errorf("the shared claim has %d status entries after the restart (%v)", n, err)
	}
	if after := e.claimResourceVersion(shared.Name); after != updatesBefore {
		t.Errorf("the shared claim was written after the restart (resourceVersion %s, was %s): the replayed clear had nothing to do", after, updatesBefore)
	}
}

func (e *env) claimResourceVersion(name string) string {
	e.t.Helper()
	c, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c.ResourceVersion
}

// ourStatusEntries counts the claim's status.devices entries of gpufrac.
func (e *env) ourStatusEntries(claim string) (int, error) {
	c, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("claim %s is gone", claim)
	}
	if err != nil {
		return 0, err
	}
	return len(slices.DeleteFunc(slices.Clone(c.Status.Devices), func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver != driver })), nil
}

// createPodWithClaim is createPod for a claim the user created, which
// outlives the pod.
func (e *env) createPodWithClaim(name, claim, node string) {
	e.t.Helper()
	e.createPodFor(name, node, v1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(claim)})
}
