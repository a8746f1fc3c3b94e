// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	healthpb "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

const nodeName = "node-a"

// shortTempDir keeps socket paths under the 108-byte limit of unix sockets,
// which t.TempDir() with a long test name can exceed.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "gf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func dial(t *testing.T, path string) *grpc.ClientConn { return dialB(t, path) }

func ptrUID(s string) *types.UID { u := types.UID(s); return &u }

func dialB(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestPluginRegistersAndPublishes drives the plugin the way the kubelet does:
// through its registration socket and its DRA socket, with the kubelet's own
// generated gRPC clients.
func TestPluginRegistersAndPublishes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	srv, err := gpusim.New("h200x2", nodeName)
	if err != nil {
		t.Fatal(err)
	}
	root := shortTempDir(t)
	cfg := nodeplugin.Config{
		NodeName:         nodeName,
		KubeClient:       client,
		NVML:             srv,
		InventoryOptions: nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem},
		PluginDataDir:    filepath.Join(root, "plugin"),
		RegistrarDir:     filepath.Join(root, "registry"),
		CDIRoot:          filepath.Join(root, "cdi"),
		CDI:              cdispec.Options{HookPath: "/opt/gpufrac/gpufrac-cdi-hook", DeviceNode: gpusim.DeviceNode},
		BootID:           "boot-1",
		Health:           nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
		OnFatal:          func(err error) { t.Errorf("fatal plugin error: %v", err) },
	}
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()

	// Registration, as the kubelet's plugin watcher does it.
	regSock := filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock")
	reg := registerapi.NewRegistrationClient(dial(t, regSock))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != "gpufrac.dev" {
		t.Errorf("GetInfo = type %q name %q, want DRAPlugin gpufrac.dev", info.Type, info.Name)
	}
	if !strings.HasPrefix(info.Endpoint, cfg.PluginDataDir) {
		t.Errorf("DRA endpoint %q is not under the plugin data dir %s", info.Endpoint, cfg.PluginDataDir)
	}
	found := false
	for _, v := range info.SupportedVersions {
		found = found || v == drapb.DRAPluginService
	}
	if !found {
		t.Errorf("supported versions %v lack %s", info.SupportedVersions, drapb.DRAPluginService)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}

	// The slices reach the API: one pool named after the node, two GPUs.
	var slices *resourceapi.ResourceSliceList
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		slices, err = client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(slices.Items) > 0, err
	})
	if err != nil {
		t.Fatalf("waiting for ResourceSlices: %v", err)
	}
	if len(slices.Items) != 1 {
		t.Fatalf("got %d slices, want 1", len(slices.Items))
	}
	s := slices.Items[0]
	if s.Spec.Driver != "gpufrac.dev" || s.Spec.Pool.Name != nodeName || ptr.Deref(s.Spec.NodeName, "") != nodeName || len(s.Spec.Devices) != 2 {
		t.Errorf("slice driver %q pool %q node %v devices %d; want gpufrac.dev, %s, %s, 2",
			s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName, len(s.Spec.Devices), nodeName, nodeName)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].Name != nodeName {
		t.Errorf("slice owners %+v, want the Node so the slices go with it", s.OwnerReferences)
	}

	// Prepare over the DRA socket: CDI devices come back, the spec is on
	// disk, and the claim's status says what was done.
	claim := allocatedClaim()
	if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := drapb.NewDRAPluginClient(dial(t, info.Endpoint))
	ref := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
	prep, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	res := prep.Claims[string(claim.UID)]
	if res == nil || res.Error != "" || len(res.Devices) != 1 {
		t.Fatalf("prepare result %+v, want one device", res)
	}
	d := res.Devices[0]
	if d.PoolName != nodeName || d.DeviceName != "gpu-0" || ptr.Deref(d.ShareId, "") != "share-1" ||
		len(d.CdiDeviceIds) != 1 || d.CdiDeviceIds[0] != "k8s.gpufrac.dev/fraction=claim-uid-1-gpu-0-share-1" {
		t.Errorf("device %+v", d)
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIRoot, "k8s.gpufrac.dev-fraction_claim-uid-1.json")); err != nil {
		t.Errorf("CDI spec: %v", err)
	}
	var got *resourceapi.ResourceClaim
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		return err == nil && len(got.Status.Devices) == 1, err
	})
	if err != nil {
		t.Fatalf("waiting for status.devices: %v", err)
	}
	st := got.Status.Devices[0]
	if st.Driver != "gpufrac.dev" || st.Device != "gpu-0" || ptr.Deref(st.ShareID, "") != "share-1" ||
		len(st.Conditions) != 1 || st.Conditions[0].Type != "Ready" || st.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("status.devices[0] = %+v", st)
	}
	var data map[string]any
	if err := json.Unmarshal(st.Data.Raw, &data); err != nil {
		t.Fatal(err)
	}
	if data["memoryRequest"] != "40Gi" || data["memoryLimit"] != "40Gi" || data["computeMode"] != "TimeSlicing" || data["enforcement"] != "dmem" {
		t.Errorf("status data %v", data)
	}

	unprep, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	if r := unprep.Claims[string(claim.UID)]; r == nil || r.Error != "" {
		t.Errorf("unprepare: %+v, want success", r)
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIRoot, "k8s.gpufrac.dev-fraction_claim-uid-1.json")); !os.IsNotExist(err) {
		t.Errorf("CDI spec after unprepare: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		return err == nil && len(got.Status.Devices) == 0, err
	})
	if err != nil {
		t.Errorf("status.devices not cleared: %v (%+v)", err, got.Status.Devices)
	}
}

// TestSMSharingStartsTheGPUsMPSDaemon prepares an SMSharing claim over the
// DRA socket: the GPU's daemon Pod is created in the plugin's namespace,
// Prepare waits until it is Ready (gpufrac_mps_daemon_ready says 1), and
// the last Unprepare deletes it (the daemon's and the share's series go).
func TestSMSharingStartsTheGPUsMPSDaemon(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	node, err := gpusim.NewNode("h200x2", nodeName, domain.EnforcementMPS)
	if err != nil {
		t.Fatal(err)
	}
	root := shortTempDir(t)
	cfg := nodeplugin.Config{
		NodeName: nodeName, KubeClient: client, NVML: node.NVML, InventoryOptions: node.InventoryOptions,
		PluginDataDir: filepath.Join(root, "plugin"), RegistrarDir: filepath.Join(root, "registry"), CDIRoot: filepath.Join(root, "cdi"),
		CDI:           cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode},
		BootID:        "boot-1",
		Health:        nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
		SMSharingGPUs: "1",
		MPS:           nodeplugin.MPSConfig{Namespace: "gpufrac-system", Image: "mps:test", Template: templates.MPSControlDaemon, ReadyTimeout: 30 * time.Second},
	}
	registry := prometheus.NewRegistry()
	cfg.Metrics = registry
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	// The node runs the daemon Pod, its startup probe passes, and its
	// script applies the plugin's settings (internal/node/mps's template test runs
	// the real script). It has stopped writing into the temporary
	// directory before the test returns, or its removal could fail.
	daemonCtx, stopDaemon := context.WithCancel(ctx)
	answered := make(chan struct{})
	defer func() {
		stopDaemon()
		<-answered
	}()
	go func() {
		defer close(answered)
		ctx := daemonCtx
		for ctx.Err() == nil {
			pods, _ := client.CoreV1().Pods("gpufrac-system").List(ctx, metav1.ListOptions{})
			for _, p := range pods.Items {
				for _, v := range p.Spec.Volumes {
					if v.Name == "config" {
						if raw, err := os.ReadFile(filepath.Join(v.HostPath.Path, mps.ConfigFile)); err == nil {
							_ = os.WriteFile(filepath.Join(v.HostPath.Path, mps.ConfigFile+mps.AppliedSuffix), raw, 0o644)
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

	claim := allocatedClaim()
	claim.Status.Allocation.Devices.Results[0].Device = "gpu-1"
	claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
		Source: resourceapi.AllocationConfigSourceClass,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","computeMode":"SMSharing"}`)},
		}},
	}}
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
	if r := prep.Claims[string(claim.UID)]; r == nil || r.Error != "" {
		t.Fatalf("prepare: %+v", r)
	}
	pods, _ := client.CoreV1().Pods("gpufrac-system").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != nodeName {
		t.Fatalf("daemon pods %d, want one on %s", len(pods.Items), nodeName)
	}
	gpu1 := plugin.Inventory().GPUs[1].UUID
	ready, incidents := gathered(t, registry, "gpufrac_mps_daemon_ready"), gathered(t, registry, "gpufrac_fraction_incidents_total")
	if len(ready) != 1 || ready[`gpu_uuid=`+gpu1+` node=`+nodeName] != 1 {
		t.Errorf("gpufrac_mps_daemon_ready after Prepare: %v, want 1 for %s", ready, gpu1)
	}
	if len(incidents) != 5 || incidents[`claim=`+claim.Name+` claim_uid=`+string(claim.UID)+` gpu_uuid=`+gpu1+` kind=MPSClientEvicted namespace=`+claim.Namespace+` node=`+nodeName] != 0 {
		t.Errorf("gpufrac_fraction_incidents_total after Prepare: %v, want every kind at 0 for the claim", incidents)
	}
	// gpu-0 is reserved for TimeSlicing by --sm-sharing-gpus=1.
	other := allocatedClaim()
	other.Name, other.UID = "other", "claim-uid-2"
	other.Status.Allocation.Devices.Config = claim.Status.Allocation.Devices.Config
	if _, err := client.ResourceV1().ResourceClaims(other.Namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prep, err = dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: "other", Uid: "claim-uid-2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := prep.Claims["claim-uid-2"]; r == nil || !strings.Contains(r.Error, "GPU gpu-0 is reserved for TimeSlicing on this node") {
		t.Errorf("SMSharing on a TimeSlicing GPU: %+v", r)
	}

	if _, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref}); err != nil {
		t.Fatal(err)
	}
	pods, _ = client.CoreV1().Pods("gpufrac-system").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 0 {
		t.Errorf("%d daemon pods after the last SMSharing claim went", len(pods.Items))
	}
	for _, family := range []string{"gpufrac_mps_daemon_ready", "gpufrac_fraction_incidents_total"} {
		if got := gathered(t, registry, family); len(got) != 0 {
			t.Errorf("%s after the Unprepare: %v, want no series", family, got)
		}
	}
}

// gathered is one family of the registry: each series' labels, sorted and
// written name=value, to its value.
func gathered(t *testing.T, registry *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, " ")] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

func allocatedClaim() *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "default", UID: "claim-uid-1"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev"},
		}}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: "gpufrac.dev", Pool: nodeName, Device: "gpu-0",
				ShareID:          ptr.To[types.UID]("share-1"),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")},
			}}},
		}},
	}
}

// TestUnhealthyGPUIsReportedAndTainted marks a simulated GPU unhealthy: the
// kubelet's health stream (its own gRPC client) reports it, the published
// slice taints it NoSchedule and gpufrac_gpu_unhealthy says so with the
// reason; clearing the file recovers all three.
func TestUnhealthyGPUIsReportedAndTainted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	cfg := simNodeConfig(t, client)
	registry := prometheus.NewRegistry()
	cfg.Metrics = registry
	healthFile := cfg.Health.SimulatedFile
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	sick := plugin.Inventory().GPUs[1].UUID

	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock"))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := healthpb.NewDRAResourceHealthClient(dial(t, info.Endpoint)).NodeWatchResources(ctx, &healthpb.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() map[string]healthpb.HealthStatus {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("health stream: %v", err)
		}
		out := map[string]healthpb.HealthStatus{}
		for _, d := range resp.Devices {
			out[d.Device.DeviceName] = d.Health
		}
		return out
	}
	if got := next(); got["gpu-0"] != healthpb.HealthStatus_HEALTHY || got["gpu-1"] != healthpb.HealthStatus_HEALTHY {
		t.Fatalf("initial report %v", got)
	}
	taints := func() []resourceapi.DeviceTaint {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(slices.Items) != 1 {
			return nil
		}
		return slices.Items[0].Spec.Devices[1].Taints
	}
	if err := os.WriteFile(healthFile, []byte(`{"`+sick+`": "XID 79"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := next(); got["gpu-1"] != healthpb.HealthStatus_UNHEALTHY || got["gpu-0"] != healthpb.HealthStatus_HEALTHY {
		t.Errorf("report after XID 79: %v", got)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		tt := taints()
		return len(tt) == 1 && tt[0].Key == "gpufrac.dev/unhealthy" && tt[0].Value == "XID-79" && tt[0].Effect == resourceapi.DeviceTaintEffectNoSchedule, nil
	})
	if err != nil {
		t.Fatalf("taint never published: %+v", taints())
	}
	unhealthy := func() map[string]string {
		families, err := registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, f := range families {
			if f.GetName() != "gpufrac_gpu_unhealthy" {
				continue
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out[l["device"]] = fmt.Sprintf("%s %q %g", l["gpu_uuid"], l["reason"], m.GetGauge().GetValue())
			}
		}
		return out
	}
	healthy0 := fmt.Sprintf("%s %q 0", plugin.Inventory().GPUs[0].UUID, "")
	if got := unhealthy(); len(got) != 2 || got["gpu-0"] != healthy0 || got["gpu-1"] != fmt.Sprintf("%s %q 1", sick, "XID 79") {
		t.Errorf("gpufrac_gpu_unhealthy after XID 79: %v", got)
	}
	if err := os.WriteFile(healthFile, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := next(); got["gpu-1"] != healthpb.HealthStatus_HEALTHY {
		t.Errorf("report after recovery: %v", got)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(taints()) == 0, nil
	})
	if err != nil {
		t.Errorf("taint not removed after recovery: %+v", taints())
	}
	if got := unhealthy(); got["gpu-1"] != fmt.Sprintf("%s %q 0", sick, "") {
		t.Errorf("gpufrac_gpu_unhealthy after recovery: %v", got)
	}
}

// simNodeConfig is a plugin on a simulated h200x2 dmem node with its
// directories under a fresh temporary folder.
func simNodeConfig(t *testing.T, client *fake.Clientset) nodeplugin.Config {
	t.Helper()
	cfg, _ := simNodeConfigGPUs(t, client, "h200x2")
	return cfg
}

// simNodeConfigGPUs is a plugin on a simulated dmem node whose GPUs are
// spec, and that node.
func simNodeConfigGPUs(t *testing.T, client *fake.Clientset, spec string) (nodeplugin.Config, *gpusim.Node) {
	t.Helper()
	node, err := gpusim.NewNode(spec, nodeName, domain.EnforcementDMem)
	if err != nil {
		t.Fatal(err)
	}
	root := shortTempDir(t)
	return nodeplugin.Config{
		NodeName: nodeName, KubeClient: client, NVML: node.NVML, InventoryOptions: node.InventoryOptions,
		PluginDataDir: filepath.Join(root, "plugin"), RegistrarDir: filepath.Join(root, "registry"), CDIRoot: filepath.Join(root, "cdi"),
		CDI: cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode, MIGCaps: gpusim.MIGCaps(len(node.NVML.Devices))}, BootID: "boot-1",
		Health: nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
	}, node
}
