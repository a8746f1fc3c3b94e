// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
)

// verbs returns the verbs of the claim actions recorded since from.
func verbs(client *fake.Clientset, from int) []string {
	var out []string
	for _, a := range client.Actions()[from:] {
		if a.GetResource().Resource == "resourceclaims" {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// A claim the kubelet helper just read needs no GET for its status write,
// nor does the Unprepare after it; a stale object falls back to the GET.
func TestStatusWriteReusesTheClaimItSaw(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pl := smPlan()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID}}
	client := fake.NewClientset(claim)
	w := claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	read, err := client.ResourceV1().ResourceClaims(pl.Namespace).Get(ctx, pl.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	from := len(client.Actions())
	w.Seen(read)
	if err := w.Apply(ctx, pl.Namespace, pl.Name, pl.UID, pl); err != nil {
		t.Fatal(err)
	}
	if got := verbs(client, from); len(got) != 1 || got[0] != "update" {
		t.Errorf("Prepare's status write made %v, want one update", got)
	}
	if len(read.Status.Devices) != 0 {
		t.Error("the object given to Seen was modified")
	}

	from = len(client.Actions())
	if err := w.Apply(ctx, pl.Namespace, pl.Name, pl.UID, nil); err != nil {
		t.Fatal(err)
	}
	if got := verbs(client, from); len(got) != 1 || got[0] != "update" {
		t.Errorf("Unprepare's status write made %v, want one update", got)
	}

	// A stale object: the API server answers Conflict, the writer reads
	// the claim and writes again.
	conflicts := 1
	client.PrependReactor("update", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, pl.Name, nil)
	})
	w.Seen(read)
	from = len(client.Actions())
	if err := w.Apply(ctx, pl.Namespace, pl.Name, pl.UID, pl); err != nil {
		t.Fatal(err)
	}
	if got := verbs(client, from); len(got) != 3 || got[0] != "update" || got[1] != "get" || got[2] != "update" {
		t.Errorf("after a conflict: %v, want update, get, update", got)
	}
	final, _ := client.ResourceV1().ResourceClaims(pl.Namespace).Get(ctx, pl.Name, metav1.GetOptions{})
	if len(final.Status.Devices) != 1 {
		t.Errorf("status after the retried write: %+v", final.Status.Devices)
	}
}

// What Seen offered for a claim whose Prepare failed is dropped.
func TestForgetSeen(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pl := smPlan()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID}}
	client := fake.NewClientset(claim)
	w := claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	w.Seen(claim)
	w.ForgetSeen(pl.Namespace, pl.Name, pl.UID)
	from := len(client.Actions())
	if err := w.Apply(ctx, pl.Namespace, pl.Name, pl.UID, pl); err != nil {
		t.Fatal(err)
	}
	if got := verbs(client, from); len(got) != 2 || got[0] != "get" {
		t.Errorf("after ForgetSeen: %v, want get, update", got)
	}
}
