// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

// TestTwoGPUShareUnderTheNodeServer prepares, on a dmem node with MPS v3,
// a TimeSlicing claim for half of each of two GPUs: under
// --mps-server-scope=node one daemon, the node server, serves both GPUs
// and the container gets per-GPU limits; under the default gpu scope
// Prepare refuses the claim with its reason. The slices say which scope
// the node runs, for a claim's selector.
func TestTwoGPUShareUnderTheNodeServer(t *testing.T) {
	for _, scope := range []string{domain.MPSServerScopeNode, domain.MPSServerScopeGPU} {
		t.Run(scope, func(t *testing.T) { twoGPUShare(t, scope) })
	}
}

func twoGPUShare(t *testing.T, scope string) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	cfg := simNodeConfig(t, client)
	cfg.MPS = nodeplugin.MPSConfig{Namespace: "gpufrac-system", Image: "mps:test", Template: templates.MPSControlDaemon, ReadyTimeout: 30 * time.Second, ServerScope: scope}
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	inv := plugin.Inventory()
	if inv.MPSVersion != domain.MPSVersionV3 || inv.MPSServerScope != scope {
		t.Fatalf("node runs MPS %q with scope %q, want v3 with %q", inv.MPSVersion, inv.MPSServerScope, scope)
	}
	// The slices say which scope the node runs, for a claim's selector.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(slices.Items) == 0 {
			return false, err
		}
		for _, d := range slices.Items[0].Spec.Devices {
			if got := ptr.Deref(d.Attributes["mpsServerScope"].StringValue, ""); got != scope {
				return false, fmt.Errorf("device %s says mpsServerScope %q, want %q", d.Name, got, scope)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("slices: %v", err)
	}
	stop := fakeDaemonKubelet(ctx, t, client)
	defer stop()

	half := resource.NewQuantity(int64(inv.GPUs[0].MemoryBytes/2)>>30<<30, resource.BinarySI)
	claim := allocatedClaim()
	claim.Status.Allocation.Devices.Results = nil
	for i, dev := range []string{"gpu-0", "gpu-1"} {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: "gpufrac.dev", Pool: nodeName, Device: dev, ShareID: ptr.To(types.UID("share-" + string(rune('a'+i)))),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": *half},
		})
	}
	if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	regInfo, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock"))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	dra := drapb.NewDRAPluginClient(dial(t, regInfo.Endpoint))
	ref := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	prep, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatal(err)
	}
	r := prep.Claims[string(claim.UID)]
	pods, _ := client.CoreV1().Pods("gpufrac-system").List(ctx, metav1.ListOptions{})
	if scope == domain.MPSServerScopeGPU {
		if r == nil || !strings.Contains(r.Error, "shares on 2 GPUs in one claim") || !strings.Contains(r.Error, "daemons are per GPU on this node") || !strings.Contains(r.Error, `mpsServerScope == "node"`) {
			t.Errorf("prepare under per-GPU daemons: %+v, want the refusal with its reason and the way to a node server", r)
		}
		if len(pods.Items) != 0 {
			t.Errorf("%d daemon pods after a refused claim", len(pods.Items))
		}
		return
	}
	if r == nil || r.Error != "" || len(r.Devices) != 2 {
		t.Fatalf("prepare under the node server: %+v, want two devices", r)
	}
	if len(pods.Items) != 1 || pods.Items[0].Labels[mps.LabelGPU] != mpslayout.NodeServerKey {
		t.Fatalf("daemon pods %d, want the one node server", len(pods.Items))
	}
	gpus := inv.GPUs[0].UUID + "," + inv.GPUs[1].UUID
	for _, e := range pods.Items[0].Spec.Containers[0].Env {
		if e.Name == "CUDA_VISIBLE_DEVICES" && e.Value != gpus {
			t.Errorf("the node server sees %q, want %q", e.Value, gpus)
		}
	}
	spec, err := os.ReadFile(filepath.Join(cfg.CDIRoot, "k8s.gpufrac.dev-fraction_"+string(claim.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	mib := strconv.FormatInt(half.Value()>>20, 10)
	perGPU := mib + "," + mib
	for _, want := range []string{"GPUFRAC_GPU_MEMORY_LIMITS=" + perGPU, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", filepath.Join(cfg.PluginDataDir, "mps", "node", "pipe")} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %q:\n%s", want, spec)
		}
	}
	if strings.Contains(string(spec), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") {
		t.Errorf("CDI spec of a node server client sets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT:\n%s", spec)
	}
	if _, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref}); err != nil {
		t.Fatal(err)
	}
	pods, _ = client.CoreV1().Pods("gpufrac-system").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Errorf("%d daemon pods after the last claim went", len(pods.Items))
	}
}

// fakeDaemonKubelet plays the kubelet and the daemon's script for daemon
// Pods: it marks them Running and Ready and copies each settings file to
// its .applied twin. It has stopped writing when the returned func
// returns.
func fakeDaemonKubelet(ctx context.Context, t *testing.T, client *fake.Clientset) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, _ := client.CoreV1().Pods("gpufrac-system").List(ctx, metav1.ListOptions{})
			for _, p := range pods.Items {
				for _, v := range p.Spec.Volumes {
					if v.Name != "config" {
						continue
					}
					for _, f := range []string{mps.ConfigFile, mps.NamespacesFile} {
						if raw, err := os.ReadFile(filepath.Join(v.HostPath.Path, f)); err == nil {
							_ = os.WriteFile(filepath.Join(v.HostPath.Path, f+mps.AppliedSuffix), raw, 0o644)
						}
					}
				}
				if p.Status.Phase != v1.PodRunning {
					p.Status.Phase = v1.PodRunning
					p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
					_, _ = client.CoreV1().Pods("gpufrac-system").UpdateStatus(ctx, &p, metav1.UpdateOptions{})
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() { cancel(); <-done }
}
