// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/internal/node/preparer"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/templates"
)

// TestCheckpointUnknownEntryIsQuarantinedNotDeleted: a checkpoint entry
// written by a later release with a state this one does not know (a
// rollback) keeps its CDI spec and its MPS daemon, stays in the file as it
// was, and is reported; the kubelet's Unprepare of that claim then cleans
// up, and only then is the unused daemon collected.
func TestCheckpointUnknownEntryIsQuarantinedNotDeleted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	known := allocated("known", "gpu-0", "s1", "10Gi", "")
	if _, err := e.preparer.Prepare(ctx, known); err != nil {
		t.Fatal(err)
	}

	// What the later release prepared: an SMSharing claim on gpu-1 whose
	// entry is in a state this release has never heard of.
	future, err := plan.Compute(allocated("future", "gpu-1", "s2", "16Gi", `,"computeMode":"SMSharing"`), e.inv,
		plan.Options{NodeName: node, MPSRoot: filepath.Join(e.dataDir, "mps")})
	if err != nil {
		t.Fatal(err)
	}
	binding := future.MPS()
	if binding == nil {
		t.Fatal("the SMSharing plan has no MPS binding")
	}
	cdi, _ := cdispec.NewWriter(e.cdiDir, cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode})
	if _, err := cdi.Write(future); err != nil {
		t.Fatal(err)
	}
	ckptPath := filepath.Join(e.dataDir, "checkpoint.json")
	rawEntry := addLaterReleaseEntry(t, ckptPath, future, "Unpreparing")
	// The known TimeSlicing claim is an MPS client too (every share on an
	// r615 node is), so its GPU's daemon runs, ready, beside the
	// quarantined claim's.
	knownPlan, err := plan.Compute(known, e.inv, plan.Options{NodeName: node, MPSRoot: filepath.Join(e.dataDir, "mps")})
	if err != nil {
		t.Fatal(err)
	}
	if knownPlan.MPS() == nil {
		t.Fatal("the TimeSlicing plan on an r615 node has no MPS binding")
	}
	daemonPod := func(gpu string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: mps.PodName(node, gpu), Namespace: "gpufrac-system",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)),
			Labels:            map[string]string{mps.LabelComponent: mps.ComponentValue, mps.LabelNode: node, mps.LabelGPU: gpu},
		}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	client := fake.NewClientset(daemonPod(binding.GPUUUID), daemonPod(knownPlan.MPS().GPUUUID))

	// The rolled-back plugin starts: checkpoint, Recover, MPS restore.
	ckpt, err := checkpoint.Open(ctx, ckptPath, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	var p *preparer.Preparer
	manager, err := mps.NewManager(mps.Config{Client: client, Namespace: "gpufrac-system", NodeName: node,
		Template: templates.MPSControlDaemon, Image: "gpufrac/mps:test", DriverRoot: "/", Version: e.inv.MPSVersion, DriverVersion: e.inv.DriverVersion,
		ReadyTimeout: time.Second, KeepUnused: func() string { return p.Uncertain() }})
	if err != nil {
		t.Fatal(err)
	}
	p = preparer.New(preparer.Config{Inventory: e.inv, PlanOptions: plan.Options{NodeName: node, MPSRoot: filepath.Join(e.dataDir, "mps")},
		Checkpoint: ckpt, CDI: cdi, Status: &statusLog{prepared: map[types.UID]*plan.Claim{}}, Events: &eventLog{}, MPS: manager})
	if err := p.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := manager.Restore(ctx, p.Prepared()); err != nil {
		t.Fatal(err)
	}

	if ok, _ := cdi.Exists(future.UID); !ok {
		t.Error("the CDI spec of the quarantined claim was deleted")
	}
	if ok, _ := cdi.Exists(known.UID); !ok {
		t.Error("the CDI spec of the understood claim was deleted")
	}
	if n := len(daemons(t, client)); n != 2 {
		t.Errorf("%d MPS daemons after the restart, want the quarantined claim's kept beside the known claim's", n)
	}
	q := ckpt.Quarantined()
	if len(q) != 1 || q[0].UID != future.UID || !strings.Contains(q[0].Reason, `state "Unpreparing" is not one of Started, Completed`) {
		t.Errorf("quarantined %+v", q)
	}
	if r := p.Uncertain(); !strings.Contains(r, "1 checkpoint entries are quarantined (claims uid-future)") {
		t.Errorf("Uncertain() = %q", r)
	}
	if got := p.Prepared(); len(got) != 1 || got[0].UID != known.UID {
		t.Errorf("prepared %v, want the understood claim only", got)
	}
	// A later write keeps the quarantined entry exactly.
	if _, err := p.Prepare(ctx, allocated("other", "gpu-0", "s3", "1Gi", "")); err != nil {
		t.Fatal(err)
	}
	onDisk, _ := os.ReadFile(ckptPath)
	if !bytes.Contains(onDisk, rawEntry) {
		t.Error("the quarantined entry was not written back as it was")
	}

	// The kubelet is done with the claim: now its spec goes, and with no
	// quarantined entry left the unused daemon is collected.
	if err := p.Unprepare(ctx, kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "future"}, UID: future.UID}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := cdi.Exists(future.UID); ok {
		t.Error("Unprepare left the quarantined claim's CDI spec")
	}
	if len(ckpt.Quarantined()) != 0 || p.Uncertain() != "" {
		t.Errorf("after Unprepare: quarantined %v, uncertain %q", ckpt.Quarantined(), p.Uncertain())
	}
	if err := manager.Restore(ctx, p.Prepared()); err != nil {
		t.Fatal(err)
	}
	// The quarantined claim's daemon is collected; the one the known
	// claims use stays.
	if left := daemons(t, client); len(left) != 1 || left[0].Labels[mps.LabelGPU] != knownPlan.MPS().GPUUUID {
		t.Errorf("MPS daemons once the quarantined claim is gone: %d, want only the known claims' on %s", len(left), knownPlan.MPS().GPUUUID)
	}
}

func daemons(t *testing.T, client *fake.Clientset) []corev1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods("gpufrac-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// addLaterReleaseEntry adds c to the checkpoint file at path as a later
// release would write it: with the given state and a field this release
// does not know. It returns the entry's bytes.
func addLaterReleaseEntry(t *testing.T, path string, c *plan.Claim, state string) []byte {
	t.Helper()
	one, err := checkpoint.Encode("boot-1", map[types.UID]checkpoint.Entry{c.UID: {State: checkpoint.Completed, Plan: *c}})
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Data struct {
			Claims map[string]map[string]json.RawMessage `json:"claims"`
		} `json:"data"`
	}
	if err := json.Unmarshal(one, &f); err != nil {
		t.Fatal(err)
	}
	entry := f.Data.Claims[string(c.UID)]
	entry["state"] = json.RawMessage(`"` + state + `"`)
	entry["unprepareStartedAt"] = json.RawMessage(`"2027-03-01T10:00:00Z"`)
	rawEntry, _ := json.Marshal(entry)

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]json.RawMessage
	var data map[string]json.RawMessage
	var claims map[string]json.RawMessage
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(file["data"], &data)
	_ = json.Unmarshal(data["claims"], &claims)
	claims[string(c.UID)] = rawEntry
	data["claims"], _ = json.Marshal(claims)
	file["data"], _ = json.Marshal(data)
	sum := sha256.Sum256(file["data"])
	file["checksum"] = json.RawMessage(`"sha256:` + hex.EncodeToString(sum[:]) + `"`)
	out, _ := json.Marshal(file)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return rawEntry
}
