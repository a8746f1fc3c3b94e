// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestRollingUpdateHandsOver runs two plugin instances on one node as a
// DaemonSet with maxSurge does during an upgrade: the new one registers
// beside the old one at once, its calls wait until the old one has exited,
// and then it answers for the claims the old one prepared, which stay
// prepared throughout.
func TestRollingUpdateHandsOver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	root := shortTempDir(t)
	config := func(podUID string) plugin.Config {
		node, err := gpusim.NewNode("h200x2", nodeName, domain.EnforcementDMem)
		if err != nil {
			t.Fatal(err)
		}
		return plugin.Config{
			NodeName: nodeName, KubeClient: client, NVML: node.NVML, InventoryOptions: node.InventoryOptions,
			PluginDataDir: filepath.Join(root, "plugin"), RegistrarDir: filepath.Join(root, "registry"), CDIRoot: filepath.Join(root, "cdi"),
			CDI:              cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode},
			BootID:           "boot-1",
			Health:           plugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
			RollingUpdateUID: types.UID(podUID),
		}
	}
	cfg := config("pod-old")
	old, err := plugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			old.Stop()
		}
	}()
	claim := allocatedClaim()
	if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	oldSockets := registrationSockets(t, cfg.RegistrarDir)
	if len(oldSockets) != 1 || oldSockets[0] == "gpufrac.dev-reg.sock" {
		t.Fatalf("registration sockets %v, want one named after the pod", oldSockets)
	}
	prep, err := draClient(ctx, t, filepath.Join(cfg.RegistrarDir, oldSockets[0])).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
	if err != nil || prep.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("prepare on the old instance: %v %+v", err, prep)
	}
	cdiSpec := filepath.Join(cfg.CDIRoot, "k8s.gpufrac.dev-fraction_claim-uid-1.json")

	// The new pod starts while the old one still runs.
	type started struct {
		p   *plugin.Plugin
		err error
	}
	newStarted := make(chan started, 1)
	go func() {
		p, err := plugin.Start(ctx, config("pod-new"))
		newStarted <- started{p, err}
	}()
	var newSocket string
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, s := range registrationSockets(t, cfg.RegistrarDir) {
			if s != oldSockets[0] {
				newSocket = s
			}
		}
		return newSocket != "", nil
	})
	if err != nil {
		t.Fatalf("the new instance never registered beside the old one: %v", err)
	}
	newDRA := draClient(ctx, t, filepath.Join(cfg.RegistrarDir, newSocket))
	type prepared struct {
		resp *drapb.NodePrepareResourcesResponse
		err  error
	}
	repeated := make(chan prepared, 1)
	go func() {
		resp, err := newDRA.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
		repeated <- prepared{resp, err}
	}()
	select {
	case r := <-repeated:
		t.Fatalf("the new instance answered while the old one still owned the node: %+v %v", r.resp, r.err)
	case <-newStarted:
		t.Fatal("the new instance finished starting while the old one still held the instance lock")
	case <-time.After(500 * time.Millisecond):
	}

	// The DaemonSet controller deletes the old pod; it exits cleanly.
	old.Stop()
	stopped = true
	if _, err := os.Stat(cdiSpec); err != nil {
		t.Fatalf("the old instance's exit removed a prepared claim's CDI spec: %v", err)
	}
	s := <-newStarted
	if s.err != nil {
		t.Fatalf("new instance: %v", s.err)
	}
	defer s.p.Stop()
	r := <-repeated
	if r.err != nil {
		t.Fatalf("repeated prepare on the new instance: %v", r.err)
	}
	if res := r.resp.Claims[string(claim.UID)]; res.GetError() != "" || len(res.GetDevices()) != 1 ||
		strings.Join(res.Devices[0].CdiDeviceIds, ",") != strings.Join(prep.Claims[string(claim.UID)].Devices[0].CdiDeviceIds, ",") {
		t.Errorf("the new instance answered %+v, want the old instance's devices %+v", res, prep.Claims[string(claim.UID)])
	}
	if got := registrationSockets(t, cfg.RegistrarDir); len(got) != 1 || got[0] != newSocket {
		t.Errorf("registration sockets after the hand-over: %v, want only %s", got, newSocket)
	}
	unprep, err := newDRA.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil || unprep.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("unprepare on the new instance: %v %+v", err, unprep)
	}
	if _, err := os.Stat(cdiSpec); !os.IsNotExist(err) {
		t.Errorf("CDI spec after the new instance unprepared the old instance's claim: %v", err)
	}
}

func registrationSockets(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), "-reg.sock") {
			out = append(out, e.Name())
		}
	}
	return out
}

// draClient finds an instance's DRA socket through its registration
// socket, as the kubelet does.
func draClient(ctx context.Context, t *testing.T, regSocket string) drapb.DRAPluginClient {
	t.Helper()
	info, err := registerapi.NewRegistrationClient(dial(t, regSocket)).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo on %s: %v", regSocket, err)
	}
	return drapb.NewDRAPluginClient(dial(t, info.Endpoint))
}
