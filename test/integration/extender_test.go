// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

// extenderSchedulerConfig is the configuration docs/design/packing.md
// documents for the opt-in scheduler extender (the one realsched
// -packing=extender measured).
const extenderSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://%s/scheduler
  prioritizeVerb: prioritize
  weight: 3
  nodeCacheCapable: true
  ignorable: true
  httpTimeout: 1s
`

// TestSchedulerExtender: with gpufrac-controller's extender named in its
// configuration, the unmodified kube-scheduler puts 40 fractions of 16Gi
// on 8 nodes of 8 H200s on no more than one GPU over the lower bound;
// with the controller stopped, pods still schedule. It needs a scheduler
// of its own (an extender applies to every pod of a scheduler process),
// so it starts a second control plane.
func TestSchedulerExtender(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	ecp, err := harness.Start(ctx, harness.Options{Progress: os.Stderr, PluginBinary: "/nonexistent/gpufrac-kubelet-plugin",
		SchedulerConfig: fmt.Appendf(nil, extenderSchedulerConfig, addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ecp.Close(); err != nil {
			t.Errorf("stopping the second control plane: %v", err)
		}
	}()
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprintf("x-%d", i)
	}
	if err := ecp.AddSliceNodes(ctx, harness.SliceNodeOptions{Names: names,
		Slices: func(ctx context.Context, node string) ([]*resourceapi.ResourceSlice, error) {
			return simulate.NodeSlices(ctx, node, "h200x8", "")
		}}); err != nil {
		t.Fatal(err)
	}
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		if _, err := ecp.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	const ns = "default"
	// The default ServiceAccount must exist before pods are admitted.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := ecp.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	tmpl := claimTemplate("frac-16g", "gpufrac.dev", "16Gi", 1, "")
	if _, err := ecp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrl, err := ecp.StartExtender(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctrl.Close() }()

	create := func(name string) {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("frac-16g")}},
				Containers: []v1.Container{{Name: "app", Image: "busybox",
					Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
			},
		}
		if _, err := ecp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
	}
	waitBound := func(n int) *harness.Placement {
		t.Helper()
		var p *harness.Placement
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			p, err = ecp.PlacementOf(ctx, ns)
			return err == nil && p.Bound == n, nil
		}); err != nil {
			t.Fatalf("waiting for %d pods bound (have %+v): %v", n, p, err)
		}
		return p
	}
	for i := range 40 {
		create(fmt.Sprintf("frac-%02d", i))
	}
	p := waitBound(40)
	t.Logf("extender: 40 pods of 16Gi on %d GPUs of %d nodes; lower bound %d", p.GPUs, p.Nodes, p.LowerBound)
	if p.LowerBound < 5 {
		t.Fatalf("lower bound %d: 40 x 16Gi cannot fit fewer than 5 H200s", p.LowerBound)
	}
	if p.GPUs > p.LowerBound+1 {
		t.Errorf("extender: %d GPUs used, want at most the lower bound %d plus one", p.GPUs, p.LowerBound)
	}

	// An outage: the scheduler still names the extender, nothing answers.
	if err := ctrl.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		create(fmt.Sprintf("outage-%d", i))
	}
	waitBound(48)
}
