// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
)

// A failed Unprepare is an Event on the claim, with the reason, so that a
// person looking at a pod stuck in Terminating finds why; the kubelet's
// retry then succeeds.
func TestUnprepareFailureIsAnEvent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	cfg := simNodeConfig(t, client)
	var failed atomic.Bool
	cfg.Failpoint = func(name string) error {
		if name == "unprepare-before-rollback" && failed.CompareAndSwap(false, true) {
			return errors.New("disk full while removing the CDI spec")
		}
		return nil
	}
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock"))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	claim := allocatedClaim()
	if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := drapb.NewDRAPluginClient(dial(t, info.Endpoint))
	ref := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	if res, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref}); err != nil || res.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	res, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Claims[string(claim.UID)]; r == nil || !strings.Contains(r.Error, "disk full") {
		t.Fatalf("unprepare result %+v, want the injected failure", r)
	}

	var event *eventsv1.Event
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events(claim.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if list.Items[i].Reason == "UnprepareFailed" {
				event = &list.Items[i]
			}
		}
		return event != nil, nil
	})
	if err != nil {
		t.Fatalf("no UnprepareFailed event: %v", err)
	}
	if event.Type != v1.EventTypeWarning || event.Regarding.Kind != "ResourceClaim" || event.Regarding.Name != claim.Name ||
		event.Regarding.UID != claim.UID || !strings.Contains(event.Note, "disk full") {
		t.Errorf("event %s %s regarding %+v: %q", event.Type, event.Reason, event.Regarding, event.Note)
	}

	// The kubelet retries; this time it goes through.
	res, err = dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil || res.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("retried unprepare: %v %+v", err, res)
	}
}
