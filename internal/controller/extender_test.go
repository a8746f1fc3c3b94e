// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/packing/extender"
)

// TestServesSchedulerExtender starts the controller as the binary does
// with --extender-address (and the packing labels, which share its claim
// informer) and calls the prioritize verb as kube-scheduler does.
func TestServesSchedulerExtender(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, controller.Config{
			Client: fake.NewClientset(), WebhookAddress: "127.0.0.1:0", ExtenderAddress: addr, PackingLabels: true,
			Cert:  webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook"},
			Ready: func(addr string) { ready <- addr },
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("controller stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("controller never served")
	}
	nodes := []string{"node-b", "node-a"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}, NodeNames: &nodes})
	var out extenderv1.HostPriorityList
	// The extender serves before Ready is called; the retry is for a slow machine only.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Post("http://"+addr+extender.PathPrioritize, "application/json", bytes.NewReader(body))
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return false, nil
		}
		return true, json.NewDecoder(resp.Body).Decode(&out)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A pod without claims asks no fraction: every node scores 0.
	if len(out) != 2 || out[0].Host != "node-b" || out[1].Host != "node-a" || out[0].Score != 0 || out[1].Score != 0 {
		t.Errorf("scores %+v, want node-b and node-a at 0", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestExtenderAddressInUse: a listen error after the informers started is
// returned, not held until the parent context ends (Run once waited for
// its informers before cancelling them; with no deadline here, that hang
// fails the test by the test binary's timeout).
func TestExtenderAddressInUse(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = controller.Run(ctx, controller.Config{
		Client: fake.NewClientset(), WebhookAddress: "127.0.0.1:0", ExtenderAddress: lis.Addr().String(),
		Cert: webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook"},
	})
	if err == nil || !strings.Contains(err.Error(), "listening for the scheduler extender on "+lis.Addr().String()) {
		t.Errorf("error %v, want one naming the extender's address", err)
	}
}
