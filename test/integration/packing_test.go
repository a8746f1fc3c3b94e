// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

// TestPackingInTheRealScheduler: with the packing policy and webhook
// registered as the chart registers them (and with the webhook alone, as
// the chart registers it before Kubernetes 1.36), the unmodified
// kube-scheduler puts 40 fractions of 16Gi on 8 nodes of 8 H200s on no
// more than one GPU over the lower bound (left to itself it spreads them
// over dozens). With the controller stopped, pods are still admitted and
// scheduled: with the policy, those of a template its parameter lists are
// still given the terms (by the API server); those of a template created
// during the outage, and every pod without the policy, are not.
func TestPackingInTheRealScheduler(t *testing.T) {
	t.Run("policy and webhook", func(t *testing.T) { testPacking(t, true) })
	t.Run("webhook alone", func(t *testing.T) { testPacking(t, false) })
}

func testPacking(t *testing.T, policy bool) {
	e := newEnv(t)
	class := e.classFor("frac", "")
	// The nodes take this test's pods only (taint) and its pods go to them
	// only (selector), so other tests' nodes and pods do not mix in.
	label := "gpufrac.dev/packing-test"
	var names []string
	prefix := "p" + rand.String(5)
	for i := range 8 {
		names = append(names, fmt.Sprintf("%s-%d", prefix, i))
	}
	taint := v1.Taint{Key: label, Value: e.ns, Effect: v1.TaintEffectNoSchedule}
	t.Cleanup(func() { _ = cp.RemoveSliceNodes(e.ctx, names) })
	if err := cp.AddSliceNodes(e.ctx, harness.SliceNodeOptions{
		Names: names, Labels: map[string]string{label: e.ns}, Taints: []v1.Taint{taint},
		Slices: func(ctx context.Context, node string) ([]*resourceapi.ResourceSlice, error) {
			return simulate.NodeSlices(ctx, node, "h200x8", "")
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.createTemplate(claimTemplate("frac-16g", class, "16Gi", 1, ""))
	opts := harness.PackingOptions{PolicyTemplate: "frac-16g"}
	if !policy {
		opts = harness.PackingOptions{NoPolicy: true}
	}
	ctrl, err := cp.StartPacking(e.ctx, e.ns, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctrl.Close() })

	create := func(name, template string) {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: v1.PodSpec{
				NodeSelector:   map[string]string{label: e.ns},
				Tolerations:    []v1.Toleration{{Key: label, Operator: v1.TolerationOpEqual, Value: e.ns, Effect: v1.TaintEffectNoSchedule}},
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
				Containers: []v1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "infinity"},
					Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
			},
		}
		if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
	}
	waitBound := func(n int) *harness.Placement {
		var p *harness.Placement
		e.poll(fmt.Sprintf("%d pods bound", n), func() (bool, error) {
			var err error
			p, err = cp.PlacementOf(e.ctx, e.ns)
			return err == nil && p.Bound == n, err
		})
		return p
	}

	calls, err := cp.WebhookCalls(e.ctx, harness.PackingWebhookName)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		create(fmt.Sprintf("frac-%02d", i), "frac-16g")
	}
	// Which path packed them: the API server's policy calls no webhook.
	after, err := cp.WebhookCalls(e.ctx, harness.PackingWebhookName)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]float64{true: 0, false: 40}[policy]; after-calls != want {
		t.Errorf("the packing webhook was called %v times for 40 pods, want %v", after-calls, want)
	}
	p := waitBound(40)
	t.Logf("packing on: 40 pods of 16Gi on %d GPUs of %d nodes; lower bound %d", p.GPUs, p.Nodes, p.LowerBound)
	if p.LowerBound < 5 {
		t.Fatalf("lower bound %d: 40 x 16Gi cannot fit fewer than 5 H200s", p.LowerBound)
	}
	if p.GPUs > p.LowerBound+1 {
		t.Errorf("packing on: %d GPUs used, want at most the lower bound %d plus one", p.GPUs, p.LowerBound)
	}
	for _, pod := range e.pods() {
		if pod.Labels[podterms.LabelFraction] != "true" {
			t.Errorf("pod %s was admitted without the packing webhook", pod.Name)
		}
	}
	// The controller labels the nodes by the GPUs their claims hold.
	e.poll("the GPUs-in-use labels", func() (bool, error) {
		sum := 0
		for _, n := range names {
			node, err := e.client.CoreV1().Nodes().Get(e.ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			v, _ := strconv.Atoi(node.Labels[nodelabel.LabelGPUsInUse])
			sum += v
		}
		return sum == p.GPUs, nil
	})

	// An outage: the controller is gone, its webhook configuration stays.
	if err := ctrl.Stop(); err != nil {
		t.Fatal(err)
	}
	e.createTemplate(claimTemplate("new-16g", class, "16Gi", 1, ""))
	for i := range 4 {
		create(fmt.Sprintf("outage-listed-%d", i), "frac-16g")
		create(fmt.Sprintf("outage-new-%d", i), "new-16g")
	}
	waitBound(48)
	for _, pod := range e.pods() {
		_, packed := pod.Labels[podterms.LabelFraction]
		switch {
		case strings.HasPrefix(pod.Name, "outage-listed-") && packed != policy:
			t.Errorf("pod %s of a listed template packed while the controller was down: %v, want %v (the policy)", pod.Name, packed, policy)
		case strings.HasPrefix(pod.Name, "outage-new-") && packed:
			t.Errorf("pod %s of a template newer than the parameter went through a stopped webhook", pod.Name)
		}
	}
}
