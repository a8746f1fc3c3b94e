// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

// TestNodeServerGPUSetChangedAcrossRestart: on a node-scope MPS v3 node,
// GPU 1 has MIG mode on, so the node server that "held" starts serves
// GPU 0 alone. While the plugin is down (or while it runs: the runtime
// subtest), MIG mode is turned off: GPU 1 serves fractions again. The restarted plugin keeps the old server for
// "held" (never ending its tenants), serves a new claim on GPU 0 from it,
// refuses one on GPU 1 with the server's set and the GPU asked for (in
// the error and the claim's PrepareFailed Event), and once the old
// server's last claim is unprepared serves GPU 1's claim from a node
// server over both GPUs.
func TestNodeServerGPUSetChangedAcrossRestart(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(map[bool]string{true: "across a restart", false: "at runtime"}[restart], func(t *testing.T) { nodeServerGPUSetChanged(t, restart) })
	}
}

// nodeServerGPUSetChanged is the test; without restart, MIG mode is
// turned off while the plugin runs, and its MIG layout check sees it.
func nodeServerGPUSetChanged(t *testing.T, restart bool) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held, same, other := shareClaim("held", "gpu-0", "20Gi"), shareClaim("same", "gpu-0", "20Gi"), shareClaim("other", "gpu-1", "20Gi")
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}, held, same, other)
	cfg, node := simNodeConfigGPUs(t, client, "h100x2")
	cfg.MPS = nodeplugin.MPSConfig{Namespace: "gpufrac-system", Image: "mps:test", Template: templates.MPSControlDaemon, ReadyTimeout: 30 * time.Second, ServerScope: domain.MPSServerScopeNode}
	gpu0, gpu1 := node.NVML.Devices[0].(*server.Device), node.NVML.Devices[1].(*server.Device)
	if err := gpusim.SetMIGMode(gpu1, nodeName, true); err != nil {
		t.Fatal(err)
	}
	stop := fakeDaemonKubelet(ctx, t, client)
	defer stop()

	first, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitSlice(ctx, t, client, []string{"gpu-0"})
	if res, err := first.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{held}); err != nil || res[held.UID].Err != nil {
		first.Stop()
		t.Fatalf("preparing held: %v %+v", err, res)
	}
	if restart {
		first.Stop()
	}
	server0 := nodeServer(ctx, t, client)
	if got := server0.Annotations[mps.AnnotationServerGPUs]; got != gpu0.UUID {
		t.Fatalf("the first node server serves %q, want %s", got, gpu0.UUID)
	}
	// A mark only this Pod carries: a replacement would lack it.
	server0.Labels["test.gpufrac.dev/first"] = "true"
	if _, err := client.CoreV1().Pods(server0.Namespace).Update(ctx, server0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := gpusim.SetMIGMode(gpu1, nodeName, false); err != nil {
		t.Fatal(err)
	}
	second := first
	if restart {
		if second, err = nodeplugin.Start(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	} else if err := first.CheckMIGLayout(ctx); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	waitSlice(ctx, t, client, []string{"gpu-0", "gpu-1"})
	res, err := second.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{same, other})
	if err != nil {
		t.Fatal(err)
	}
	if res[same.UID].Err != nil {
		t.Errorf("a claim on GPU 0, which the old server serves, was refused: %v", res[same.UID].Err)
	}
	refusal := res[other.UID].Err
	for _, want := range []string{"allowed_devices: ", "[" + gpu0.UUID + "]", "[" + gpu0.UUID + "," + gpu1.UUID + "]", "does not serve GPU " + gpu1.UUID, "default/held"} {
		if refusal == nil || !strings.Contains(refusal.Error(), want) {
			t.Errorf("the claim on GPU 1: %v, want a refusal saying %q", refusal, want)
		}
	}
	if note := waitForEvent(ctx, t, client, other, "PrepareFailed"); !strings.Contains(note, "does not serve GPU "+gpu1.UUID) {
		t.Errorf("PrepareFailed Event %q does not say which GPU the server lacks", note)
	}
	if now := nodeServer(ctx, t, client); now.Annotations[mps.AnnotationServerGPUs] != gpu0.UUID || now.Labels["test.gpufrac.dev/first"] != "true" {
		t.Fatalf("the node server was replaced under its claims: serves %q", now.Annotations[mps.AnnotationServerGPUs])
	}

	unprep, err := second.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{ref(held), ref(same)})
	if err != nil || unprep[held.UID] != nil || unprep[same.UID] != nil {
		t.Fatalf("unpreparing: %v %v", err, unprep)
	}
	res, err = second.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{other})
	if err != nil || res[other.UID].Err != nil {
		t.Fatalf("the claim on GPU 1 once the old server's claims went: %v %+v", err, res)
	}
	want := gpu0.UUID + "," + gpu1.UUID
	now := nodeServer(ctx, t, client)
	if got := now.Annotations[mps.AnnotationServerGPUs]; got != want {
		t.Errorf("the new node server serves %q, want %q", got, want)
	}
	for _, e := range now.Spec.Containers[0].Env {
		if e.Name == "CUDA_VISIBLE_DEVICES" && e.Value != want {
			t.Errorf("the new node server sees %q, want %q", e.Value, want)
		}
	}
}

// nodeServer is the node server's Pod; the test fails without one.
func nodeServer(ctx context.Context, t *testing.T, client *fake.Clientset) *v1.Pod {
	t.Helper()
	pod, err := client.CoreV1().Pods("gpufrac-system").Get(ctx, mps.PodName(nodeName, mpslayout.NodeServerKey), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node server: %v", err)
	}
	return pod
}

func ref(c *resourceapi.ResourceClaim) kubeletplugin.NamespacedObject {
	return kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}
}
