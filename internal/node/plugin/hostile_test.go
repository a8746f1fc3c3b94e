// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
)

// TestHostileAllocationsOverGRPC prepares, through the kubelet's DRA gRPC
// API, claims whose status.allocation a client allowed to write claim
// status filled with values the API server does not refuse. Each row is
// one such claim, all in one NodePrepareResources call beside a good
// claim: each hostile claim fails alone with an error naming the field,
// the value and the bound, leaves no CDI spec and no checkpoint entry,
// and gets a PrepareFailed Event within the API's 1 KiB note limit; the
// good claim is prepared. The node is h200x2: 141Gi per GPU, all offered,
// at most 282 shares of 1Gi.
func TestHostileAllocationsOverGRPC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	cfg, dra := startSimPlugin(ctx, t, client)

	const bound = `must be a whole number of bytes in (0, 141Gi], the memory GPU gpu-0 offers on this node (151397597184 bytes)`
	consumed := func(q string) func(*resourceapi.ResourceClaim) {
		return func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].ConsumedCapacity["memory"] = resource.MustParse(q)
		}
	}
	shares := func(n int, q, device string) func(*resourceapi.ResourceClaim) {
		return func(c *resourceapi.ResourceClaim) {
			r0 := c.Status.Allocation.Devices.Results[0]
			c.Status.Allocation.Devices.Results = nil
			for i := range n {
				r := r0
				r.Device = device
				r.ShareID = ptr.To(types.UID(fmt.Sprintf("share-%d", i)))
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}
				c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
			}
		}
	}
	const field0 = `status.allocation.devices.results[0].consumedCapacity[memory]: Invalid value: `
	for _, tc := range []struct {
		name   string
		mutate func(*resourceapi.ResourceClaim)
		want   string
	}{
		{"negative", consumed("-1"), field0 + `"-1": ` + bound},
		{"negative Gi", consumed("-40Gi"), field0 + `"-40Gi": ` + bound},
		{"zero", consumed("0"), field0 + `"0": ` + bound},
		{"a fraction of a byte", consumed("0.5"), field0 + `"500m": ` + bound},
		{"one byte above the GPU", consumed("151397597185"), field0 + `"151397597185": ` + bound},
		{"int64 max", consumed("9223372036854775807"), field0 + `"9223372036854775807": ` + bound},
		{"int64 min", consumed("-9223372036854775808"), field0 + `"-9223372036854775808": ` + bound},
		{"1e30", consumed("1e30"), field0 + `"1e30": ` + bound},
		{"two shares of one GPU above it together", shares(2, "100Gi", "gpu-0"),
			`status.allocation.devices.results: Invalid value: "200Gi": the claim's shares of GPU gpu-0 consume this much together, more than the 141Gi it offers on this node`},
		{"more shares than the node holds", shares(283, "1Gi", "gpu-0"),
			`status.allocation.devices.results: Invalid value: 283: 283 gpufrac shares in one claim, but this node's 2 GPUs hold at most 282 (shares of at least 1Gi)`},
		{"32 results on devices the node lacks, names 2 KiB long", shares(32, "1Gi", strings.Repeat("x", 2048)),
			`status.allocation.devices.results[0].device: Not found: "xxxx`},
		{"a share ID that climbs out of a directory", func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("../../../etc/passwd"))
		}, `status.allocation.devices.results[0].shareID: Invalid value: "../../../etc/passwd": must be a UID`},
		{"a claim UID that climbs out of a directory", func(c *resourceapi.ResourceClaim) { c.UID = "../../../etc/x" },
			`uid "../../../etc/x" is not a UID (lowercase letters, digits and '-', at most 63); nothing named after it is touched`},
		{"a claim UID with a NUL", func(c *resourceapi.ResourceClaim) { c.UID = "a\x00b" },
			`uid "a\x00b" is not a UID`},
		{"another node's pool", func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Pool = "node-b" },
			`status.allocation.devices.results[0].pool: Invalid value: "node-b": allocated from another node's pool`},
		{"a device name with ../", func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Device = "../gpu-0" },
			`status.allocation.devices.results[0].device: Not found: "../gpu-0"`},
		{"memoryLimit 1e30", func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
				Source: resourceapi.AllocationConfigSourceClaim,
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"1e30"}`)}}},
			}}
		}, `status.allocation.devices.results[0].config.memoryLimit: Invalid value: "1e30": must not exceed the GPU's memory 141Gi`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("%08x", hash(tc.name))
			bad := allocatedClaim()
			bad.Name, bad.UID = "bad-"+id, types.UID("bad-uid-"+id)
			tc.mutate(bad)
			good := allocatedClaim()
			good.Name, good.UID = "good-"+id, types.UID("good-uid-"+id)
			for _, c := range []*resourceapi.ResourceClaim{bad, good} {
				if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			refs := []*drapb.Claim{
				{Namespace: bad.Namespace, Name: bad.Name, Uid: string(bad.UID)},
				{Namespace: good.Namespace, Name: good.Name, Uid: string(good.UID)},
			}
			prep, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: refs})
			if err != nil {
				t.Fatalf("NodePrepareResources: %v", err)
			}
			if r := prep.Claims[string(good.UID)]; r == nil || r.Error != "" || len(r.Devices) != 1 {
				t.Errorf("the good claim beside the hostile one: %+v", r)
			}
			r := prep.Claims[string(bad.UID)]
			if r == nil || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("hostile claim: %+v\nwant an error containing %s", r, tc.want)
			}
			if len(r.Error) > plan.MaxErrorBytes {
				t.Errorf("error of %d bytes; InvalidError is capped at %d", len(r.Error), plan.MaxErrorBytes)
			}
			// 32 errors of 2 KiB each cannot all be told in 4 KiB.
			if len(bad.Status.Allocation.Devices.Results) == 32 && !strings.Contains(r.Error, "more left out)") {
				t.Errorf("a capped error must count what it left out: %s", r.Error)
			}
			// Nothing left behind: the good claim's CDI spec alone, no
			// checkpoint entry.
			if specs, err := os.ReadDir(cfg.CDIRoot); err != nil || len(specs) != 1 || !strings.Contains(specs[0].Name(), string(good.UID)) {
				t.Errorf("CDI specs %v (%v), want the good claim's alone", specs, err)
			}
			if raw, err := os.ReadFile(filepath.Join(cfg.PluginDataDir, nodeplugin.CheckpointFile)); err != nil || strings.Contains(string(raw), string(bad.UID)) {
				t.Errorf("checkpoint (err %v) mentions the hostile claim", err)
			}
			note := waitForEvent(ctx, t, client, bad, "PrepareFailed")
			if len(note) > 1024 || !strings.Contains(note, tc.want[:min(len(tc.want), 200)]) {
				t.Errorf("PrepareFailed note (%d bytes): %s", len(note), note)
			}
			if _, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: refs}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// startSimPlugin starts the plugin on a simulated h200x2 node (stopped at
// the end of the test) and returns its config and its DRA client, found
// through the registration socket as the kubelet finds it.
func startSimPlugin(ctx context.Context, t *testing.T, client *fake.Clientset) (nodeplugin.Config, drapb.DRAPluginClient) {
	t.Helper()
	cfg := simNodeConfig(t, client)
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	return cfg, draClient(ctx, t, filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock"))
}

func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// waitForEvent returns the note of the first Event of reason about claim.
func waitForEvent(ctx context.Context, t *testing.T, client *fake.Clientset, claim *resourceapi.ResourceClaim, reason string) string {
	t.Helper()
	var note string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events(claim.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.UID == claim.UID {
				note = e.Note
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on claim %s: %v", reason, claim.Name, err)
	}
	return note
}

// TestHostileUnprepareOverGRPC: NodeUnprepareResources carries claim UIDs
// the plugin does not look up (the claim may be gone); one that is not a
// UID fails alone, naming it, and no file outside the CDI directory is
// touched. (Only the kubelet, as root, reaches the socket: this is defence
// in depth.)
func TestHostileUnprepareOverGRPC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	cfg, dra := startSimPlugin(ctx, t, client)
	// A victim beside the CDI directory, where "../" from a spec name lands.
	victim := filepath.Join(filepath.Dir(cfg.CDIRoot), "victim.json")
	if err := os.WriteFile(victim, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"../../../victim", "../../victim", "../victim", "a/../../victim", "UPPER", "", strings.Repeat("a", 64), "a\x00b"} {
		res, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
			{Namespace: "default", Name: "x", Uid: uid}, {Namespace: "default", Name: "fine", Uid: "fine-uid"},
		}})
		if err != nil {
			t.Fatalf("uid %q: %v", uid, err)
		}
		if r := res.Claims[uid]; r == nil || !strings.Contains(r.Error, "not a UID") {
			t.Errorf("uid %q: %+v, want a refusal naming it", uid, r)
		}
		if r := res.Claims["fine-uid"]; r == nil || r.Error != "" {
			t.Errorf("the claim beside uid %q: %+v", uid, r)
		}
		if _, err := os.Stat(victim); err != nil {
			t.Fatalf("uid %q: the file beside the CDI directory: %v", uid, err)
		}
	}
}
