// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
)

// otherPool is a second node's pool: what its plugin wrote in a claim's
// status is not this node's to change.
const otherPool = "node-b"

// otherNodesEntry is the Ready entry node-b's plugin wrote.
func otherNodesEntry() resourceapi.AllocatedDeviceStatus {
	return resourceapi.AllocatedDeviceStatus{
		Driver: "gpufrac.dev", Pool: otherPool, Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", Message: "node-b's share", LastTransitionTime: metav1.Now()}},
	}
}

// claimOnNodeB is a claim prepared on node-b, with node-b's Ready entry.
func claimOnNodeB() *resourceapi.ResourceClaim {
	c := allocatedClaim()
	c.Name, c.UID = "on-node-b", "uid-on-node-b"
	c.Status.Allocation.Devices.Results[0].Pool = otherPool
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{otherNodesEntry()}
	return c
}

// localRig is one plugin on a simulated node, started and stopped by the
// row (Stop flushes every pending status write, so what a row reads after
// it is final).
type localRig struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	cfg    nodeplugin.Config
	plugin *nodeplugin.Plugin
	// running: started and not stopped yet (Stop is called once).
	running bool
	dra     drapb.DRAPluginClient
}

func newLocalRig(ctx context.Context, t *testing.T, claims ...*resourceapi.ResourceClaim) *localRig {
	t.Helper()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	for _, c := range claims {
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return &localRig{t: t, ctx: ctx, client: client, cfg: simNodeConfig(t, client)}
}

func (r *localRig) start() {
	r.t.Helper()
	p, err := nodeplugin.Start(r.ctx, r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.plugin, r.running = p, true
	r.t.Cleanup(func() {
		if r.running {
			p.Stop()
		}
	})
	r.dra = draClient(r.ctx, r.t, filepath.Join(r.cfg.RegistrarDir, "gpufrac.dev-reg.sock"))
}

func (r *localRig) stop() {
	r.plugin.Stop()
	r.running = false
}

func (r *localRig) prepare(c *resourceapi.ResourceClaim) {
	r.t.Helper()
	res, err := r.dra.NodePrepareResources(r.ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
	if err != nil || res.Claims[string(c.UID)].GetError() != "" {
		r.t.Fatalf("preparing %s: %v %+v", c.Name, err, res)
	}
}

func (r *localRig) unprepare(namespace, name string, uid types.UID) {
	r.t.Helper()
	res, err := r.dra.NodeUnprepareResources(r.ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: namespace, Name: name, Uid: string(uid)}}})
	if err != nil || res.Claims[string(uid)].GetError() != "" {
		r.t.Fatalf("unpreparing %s/%s (uid %s): %v %+v", namespace, name, uid, err, res)
	}
}

// devices is the claim's status.devices as the API server holds it.
func (r *localRig) devices(c *resourceapi.ResourceClaim) []resourceapi.AllocatedDeviceStatus {
	r.t.Helper()
	got, err := r.client.ResourceV1().ResourceClaims(c.Namespace).Get(r.ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return got.Status.Devices
}

func (r *localRig) wantOtherNodesEntry(c *resourceapi.ResourceClaim) {
	r.t.Helper()
	if !slices.ContainsFunc(r.devices(c), func(d resourceapi.AllocatedDeviceStatus) bool { return d.Pool == otherPool }) {
		r.t.Errorf("claim %s lost node-b's status entry: %+v", c.Name, r.devices(c))
	}
}

func (r *localRig) clearsLog() string {
	return filepath.Join(r.cfg.PluginDataDir, nodeplugin.CheckpointFile) + checkpoint.StatusClearsSuffix
}

// TestHostileLocalStaysLocal: a node's plugin changes only its own pool's
// status.devices entries, of claims it prepared, named as its checkpoint
// names them; nothing a call or a file on the node carries reaches
// another node's entries (issue 34, "Local stays local").
func TestHostileLocalStaysLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(r *localRig)
	}{
		{"an Unprepare of a claim this node never prepared clears nothing", func(r *localRig) {
			b := claimOnNodeB()
			r.start()
			r.unprepare(b.Namespace, b.Name, b.UID)
			r.stop()
			r.wantOtherNodesEntry(b)
		}},
		{"an Unprepare naming another claim clears the claim prepared here, by its recorded name", func(r *localRig) {
			b := claimOnNodeB()
			mine := allocatedClaim()
			if _, err := r.client.ResourceV1().ResourceClaims(mine.Namespace).Create(r.ctx, mine, metav1.CreateOptions{}); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.prepare(mine)
			r.unprepare(b.Namespace, b.Name, mine.UID)
			r.stop()
			r.wantOtherNodesEntry(b)
			if d := r.devices(mine); len(d) != 0 {
				r.t.Errorf("the claim unprepared here still has status entries: %+v", d)
			}
		}},
		{"a claim prepared here keeps another pool's entry through Prepare and Unprepare", func(r *localRig) {
			mine := allocatedClaim()
			mine.Status.Devices = []resourceapi.AllocatedDeviceStatus{otherNodesEntry()}
			if _, err := r.client.ResourceV1().ResourceClaims(mine.Namespace).Create(r.ctx, mine, metav1.CreateOptions{}); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.prepare(mine)
			r.unprepare(mine.Namespace, mine.Name, mine.UID)
			r.stop()
			r.wantOtherNodesEntry(mine)
			if d := r.devices(mine); slices.ContainsFunc(d, func(d resourceapi.AllocatedDeviceStatus) bool { return d.Pool == nodeName }) {
				r.t.Errorf("this node's entry outlived Unprepare: %+v", d)
			}
		}},
		{"a forged record in the status clears log clears no other node's entry", func(r *localRig) {
			b := claimOnNodeB()
			if err := os.MkdirAll(r.cfg.PluginDataDir, 0o700); err != nil {
				r.t.Fatal(err)
			}
			forged := "gpufrac status clears v1\n" + `{"namespace":"default","name":"on-node-b","uid":"uid-on-node-b"}` + "\n"
			if err := os.WriteFile(r.clearsLog(), []byte(forged), 0o600); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.stop()
			r.wantOtherNodesEntry(b)
		}},
		{"the status clears log planted as a link to a file elsewhere is not written through", func(r *localRig) {
			victim := filepath.Join(filepath.Dir(r.cfg.PluginDataDir), "victim")
			const content = "gpufrac status clears v1\n"
			if err := os.WriteFile(victim, []byte(content), 0o600); err != nil {
				r.t.Fatal(err)
			}
			if err := os.MkdirAll(r.cfg.PluginDataDir, 0o700); err != nil {
				r.t.Fatal(err)
			}
			if err := os.Symlink(victim, r.clearsLog()); err != nil {
				r.t.Fatal(err)
			}
			mine := allocatedClaim()
			if _, err := r.client.ResourceV1().ResourceClaims(mine.Namespace).Create(r.ctx, mine, metav1.CreateOptions{}); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.prepare(mine)
			r.unprepare(mine.Namespace, mine.Name, mine.UID)
			r.stop()
			if raw, err := os.ReadFile(victim); err != nil || string(raw) != content {
				r.t.Errorf("the file the link pointed at was written: %q (%v)", raw, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			tc.run(newLocalRig(ctx, t, claimOnNodeB()))
		})
	}
}

// TestHostileNodeState: what the plugin finds in its own directories at
// start is checked as a fresh Prepare's input would be, not trusted for
// being its own (issue 34, "Nothing trusted because it is ours").
func TestHostileNodeState(t *testing.T) {
	ckptPath := func(r *localRig) string { return filepath.Join(r.cfg.PluginDataDir, nodeplugin.CheckpointFile) }
	for _, tc := range []struct {
		name string
		run  func(r *localRig)
	}{
		{"a checkpoint entry holding more memory than its GPU is quarantined, not restored", func(r *localRig) {
			mine := allocatedClaim()
			if _, err := r.client.ResourceV1().ResourceClaims(mine.Namespace).Create(r.ctx, mine, metav1.CreateOptions{}); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.prepare(mine)
			r.stop()
			ckpt, err := checkpoint.Open(r.ctx, ckptPath(r), r.cfg.BootID)
			if err != nil {
				r.t.Fatal(err)
			}
			e, ok := ckpt.Get(mine.UID)
			if !ok {
				r.t.Fatal("the prepared claim is not in the checkpoint")
			}
			e.Plan.UID, e.Plan.Name = "forged-uid", "forged"
			e.Plan.Devices[0].SoftLimitBytes, e.Plan.Devices[0].HardLimitBytes = 200e12, 200e12
			if err := ckpt.Put(e); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.stop()
			if _, err := os.Stat(filepath.Join(r.cfg.CDIRoot, cdispec.SpecName("forged-uid"))); err == nil {
				r.t.Errorf("a CDI spec was written for the forged entry")
			}
		}},
		{"a checkpoint file far larger than any node's is refused before it is read", func(r *localRig) {
			if err := os.MkdirAll(r.cfg.PluginDataDir, 0o700); err != nil {
				r.t.Fatal(err)
			}
			f, err := os.Create(ckptPath(r))
			if err != nil {
				r.t.Fatal(err)
			}
			// Sparse: costs no disk, 300 MB to whoever reads it whole.
			if err := f.Truncate(300 << 20); err != nil {
				r.t.Fatal(err)
			}
			_ = f.Close()
			ckpt, err := checkpoint.Open(r.ctx, ckptPath(r), r.cfg.BootID)
			if err != nil {
				r.t.Fatal(err)
			}
			if u := ckpt.Unreadable(); !strings.Contains(u, "larger than") {
				r.t.Errorf("Unreadable() = %q, want it to name the size bound", u)
			}
		}},
		{"a boot marker far larger than a boot id is refused before it is read", func(r *localRig) {
			if err := os.MkdirAll(r.cfg.PluginDataDir, 0o700); err != nil {
				r.t.Fatal(err)
			}
			if err := os.WriteFile(ckptPath(r)+checkpoint.BootMarkerSuffix, []byte(strings.Repeat("b", 1<<20)), 0o600); err != nil {
				r.t.Fatal(err)
			}
			_, err := checkpoint.Open(r.ctx, ckptPath(r), r.cfg.BootID)
			if err == nil || !strings.Contains(err.Error(), "larger than") {
				r.t.Errorf("Open: %v, want an error naming the size bound", err)
			}
		}},
		{"a data directory left world-writable is made the plugin's alone", func(r *localRig) {
			if err := os.MkdirAll(r.cfg.PluginDataDir, 0o700); err != nil {
				r.t.Fatal(err)
			}
			if err := os.Chmod(r.cfg.PluginDataDir, 0o777); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.stop()
			if fi, err := os.Stat(r.cfg.PluginDataDir); err != nil || fi.Mode().Perm() != 0o700 {
				r.t.Errorf("data directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
			}
		}},
		{"a CDI spec of a prepared claim that does not parse is written again, with an Event", func(r *localRig) {
			mine := allocatedClaim()
			if _, err := r.client.ResourceV1().ResourceClaims(mine.Namespace).Create(r.ctx, mine, metav1.CreateOptions{}); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.prepare(mine)
			r.stop()
			spec := filepath.Join(r.cfg.CDIRoot, cdispec.SpecName(mine.UID))
			if err := os.WriteFile(spec, []byte(`{"cdiVersion":"0.6.0","kind":`), 0o600); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			if _, err := cdiapi.ReadSpec(spec, 0); err != nil {
				r.t.Errorf("the spec still does not parse after a restart: %v", err)
			}
			waitForEvent(r.ctx, r.t, r.client, mine, "CDISpecRestored")
			r.stop()
		}},
		{"leftover temp files of failed spec writes are removed at start, another producer's kept", func(r *localRig) {
			if err := os.MkdirAll(r.cfg.CDIRoot, 0o755); err != nil {
				r.t.Fatal(err)
			}
			ours := filepath.Join(r.cfg.CDIRoot, "spec.1234.tmp")
			if err := os.WriteFile(ours, []byte(`{"cdiVersion":"0.6.0","kind":"k8s.gpufrac.dev/fraction","devi`), 0o600); err != nil {
				r.t.Fatal(err)
			}
			theirs := filepath.Join(r.cfg.CDIRoot, "spec.5678.tmp")
			if err := os.WriteFile(theirs, []byte(`{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devi`), 0o600); err != nil {
				r.t.Fatal(err)
			}
			r.start()
			r.stop()
			if _, err := os.Stat(ours); err == nil {
				r.t.Errorf("gpufrac's leftover %s is still there", ours)
			}
			if _, err := os.Stat(theirs); err != nil {
				r.t.Errorf("another producer's temp file was removed: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			tc.run(newLocalRig(ctx, t, claimOnNodeB()))
		})
	}
}
