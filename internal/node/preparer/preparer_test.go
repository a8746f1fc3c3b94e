// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/node/preparer"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const node = "node-a"

type statusLog struct {
	mu         sync.Mutex
	prepared   map[types.UID]*plan.Claim
	unprepared []types.UID
	restored   []types.UID
	// cleared, when set, is told of each clear as the real writer's
	// SetOnCleared callback is once the clear is written.
	cleared func(types.UID)
}

func (s *statusLog) Prepared(c *plan.Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prepared[c.UID] = c
}

// Restored keeps what an earlier process wrote, as the writer does: a
// claim with status already is left as it is.
func (s *statusLog) Restored(c *plan.Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.prepared[c.UID]; !ok {
		s.prepared[c.UID] = c
	}
	s.restored = append(s.restored, c.UID)
}

func (s *statusLog) Unprepared(_, _ string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.prepared, uid)
	s.unprepared = append(s.unprepared, uid)
	if s.cleared != nil {
		s.cleared(uid)
	}
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (e *eventLog) PrepareFailed(claim *resourceapi.ResourceClaim, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, claim.Name+": "+err.Error())
}

func (e *eventLog) CDISpecRestored(c *plan.Claim, path, _ string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, c.Name+": CDISpecRestored "+path)
}

// fakeMPS counts users per GPU the way the MPS manager must.
type fakeMPS struct {
	mu    sync.Mutex
	users map[string]map[types.UID]bool
	fail  error
}

func (m *fakeMPS) Acquire(_ context.Context, b mpslayout.Binding, c *plan.Claim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.users[b.GPUUUID] == nil {
		m.users[b.GPUUUID] = map[types.UID]bool{}
	}
	m.users[b.GPUUUID][c.UID] = true
	return nil
}

func (m *fakeMPS) Release(_ context.Context, b mpslayout.Binding, uid types.UID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.users[b.GPUUUID], uid)
	if len(m.users[b.GPUUUID]) == 0 {
		delete(m.users, b.GPUUUID)
	}
	return nil
}

type env struct {
	t        testing.TB
	dataDir  string
	cdiDir   string
	inv      *domain.Inventory
	status   *statusLog
	events   *eventLog
	mps      *fakeMPS
	failAt   string
	preparer *preparer.Preparer
	ckpt     *checkpoint.Checkpoint
}

func newEnv(t *testing.T) *env { return newEnvB(t, t) }

// newEnvB sets up over tb, logging through t when it is a test.
func newEnvB(tb testing.TB, _ *testing.T) *env { return newEnvGPUs(tb, "h200x2") }

// newEnvGPUs sets up a node whose simulated GPUs are spec.
func newEnvGPUs(t testing.TB, spec string) *env {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	n, err := gpusim.NewNode(spec, node, domain.EnforcementDMem)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, n.NVML, n.InventoryOptions)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dataDir: t.TempDir(), cdiDir: t.TempDir(), inv: inv, mps: &fakeMPS{users: map[string]map[types.UID]bool{}}}
	e.restart()
	return e
}

// restart builds a new preparer over the same files, as a restarted plugin
// process does.
func (e *env) restart() {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	ckpt, err := checkpoint.Open(ctx, filepath.Join(e.dataDir, "checkpoint.json"), "boot-1")
	if err != nil {
		e.t.Fatal(err)
	}
	cdi, err := cdispec.NewWriter(e.cdiDir, cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode, MIGCaps: gpusim.MIGCaps(8)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.ckpt = ckpt
	e.status = &statusLog{prepared: map[types.UID]*plan.Claim{}}
	e.events = &eventLog{}
	var mps preparer.MPS
	if e.mps != nil {
		mps = e.mps
	}
	e.preparer = preparer.New(preparer.Config{
		Inventory:   e.inv,
		PlanOptions: plan.Options{NodeName: node, MPSRoot: filepath.Join(e.dataDir, "mps")},
		Checkpoint:  ckpt,
		CDI:         cdi,
		Status:      e.status,
		Events:      e.events,
		MPS:         mps,
		Failpoint: func(name string) error {
			if name == e.failAt {
				return errors.New("injected")
			}
			return nil
		},
	})
	if err := e.preparer.Recover(ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) cdiFiles() []string {
	entries, _ := os.ReadDir(e.cdiDir)
	var out []string
	for _, x := range entries {
		out = append(out, x.Name())
	}
	return out
}

func allocated(name, device, share, memory, params string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	alloc := &resourceapi.AllocationResult{}
	alloc.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: "gpufrac.dev", Pool: node, Device: device, ShareID: ptr.To(types.UID(share)),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)},
	}}
	if params != "" {
		alloc.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig"` + params + `}`)},
			}},
		}}
	}
	c.Status.Allocation = alloc
	return c
}

func TestPrepareRestartUnprepare(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	claim := allocated("llm", "gpu-0", "s1", "40Gi", `,"memoryLimit":"60Gi"`)
	devs, err := e.preparer.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	want := []kubeletplugin.Device{{Requests: []string{"gpu"}, PoolName: node, DeviceName: "gpu-0",
		CDIDeviceIDs: []string{"k8s.gpufrac.dev/fraction=uid-llm-gpu-0-s1"}, ShareID: ptr.To(types.UID("s1"))}}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("devices %+v, want %+v", devs, want)
	}
	if files := e.cdiFiles(); len(files) != 1 {
		t.Fatalf("CDI files %v, want one", files)
	}
	if entry, ok := e.ckpt.Get(claim.UID); !ok || entry.State != checkpoint.Completed || entry.Plan.Devices[0].HardLimitBytes != 60<<30 {
		t.Fatalf("checkpoint entry %+v", entry)
	}
	if e.status.prepared[claim.UID] == nil {
		t.Error("status not reported")
	}
	specPath := filepath.Join(e.cdiDir, e.cdiFiles()[0])
	before, _ := os.Stat(specPath)

	e.restart()
	again, err := e.preparer.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, devs) {
		t.Errorf("after restart: %+v, want %+v", again, devs)
	}
	after, _ := os.Stat(specPath)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("the CDI spec was rewritten by a repeated Prepare")
	}

	// The kubelet unprepares with identity only; the object may be gone.
	e.restart()
	ref := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "llm"}, UID: claim.UID}
	if err := e.preparer.Unprepare(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if files := e.cdiFiles(); len(files) != 0 {
		t.Errorf("CDI files left: %v", files)
	}
	if _, ok := e.ckpt.Get(claim.UID); ok {
		t.Error("checkpoint entry left")
	}
	if len(e.status.unprepared) != 1 {
		t.Errorf("status not cleared: %v", e.status.unprepared)
	}
	if err := e.preparer.Unprepare(ctx, ref); err != nil {
		t.Errorf("second Unprepare: %v", err)
	}
}

func TestPrepareRewritesALostSpec(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	claim := allocated("llm", "gpu-0", "s1", "40Gi", "")
	if _, err := e.preparer.Prepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	for _, f := range e.cdiFiles() {
		_ = os.Remove(filepath.Join(e.cdiDir, f))
	}
	if _, err := e.preparer.Prepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if len(e.cdiFiles()) != 1 {
		t.Error("a lost CDI spec of a prepared claim was not written again")
	}
}

func TestFailureAtEveryStepLeavesNothing(t *testing.T) {
	for _, point := range []string{
		"prepare-before-checkpoint-started",
		"prepare-after-checkpoint-started",
		"prepare-after-mps",
		"prepare-after-cdi-write",
		"prepare-after-checkpoint-completed",
	} {
		t.Run(point, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e := newEnv(t)
			e.failAt = point
			claim := allocated("sm", "gpu-1", "s1", "16Gi", `,"computeMode":"SMSharing"`)
			_, err := e.preparer.Prepare(ctx, claim)
			if err == nil || !strings.Contains(err.Error(), "failpoint "+point) {
				t.Fatalf("Prepare error %v, want the injected failure", err)
			}
			if files := e.cdiFiles(); len(files) != 0 {
				t.Errorf("CDI files left: %v", files)
			}
			if n := len(e.ckpt.Entries()); n != 0 {
				t.Errorf("%d checkpoint entries left", n)
			}
			if len(e.mps.users) != 0 {
				t.Errorf("MPS users left: %v", e.mps.users)
			}
			if len(e.events.events) != 1 {
				t.Errorf("events %v, want one", e.events.events)
			}
			e.failAt = ""
			if _, err := e.preparer.Prepare(ctx, claim); err != nil {
				t.Errorf("retry after the failure: %v", err)
			}
			if len(e.mps.users) != 1 || len(e.cdiFiles()) != 1 {
				t.Errorf("retry: MPS users %v, CDI files %v", e.mps.users, e.cdiFiles())
			}
		})
	}
}

// TestUnprepareRetriedAfterACrashClearsStatus: a plugin killed right
// after Unprepare forgot the claim never queued the status write; the
// kubelet's retry (in a new process, nothing in the checkpoint) must still
// clear the claim's status.
func TestUnprepareRetriedAfterACrashClearsStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	claim := allocated("llm", "gpu-0", "s1", "40Gi", "")
	if _, err := e.preparer.Prepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	ref := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "llm"}, UID: claim.UID}
	e.failAt = "unprepare-after-rollback"
	if err := e.preparer.Unprepare(ctx, ref); err == nil {
		t.Fatal("Unprepare passed the injected failure")
	}
	if len(e.status.unprepared) != 0 {
		t.Fatalf("status cleared before the failpoint: %v", e.status.unprepared)
	}
	e.failAt = ""
	e.restart()
	// The restart clears it from the checkpoint's record, before any retry.
	if !reflect.DeepEqual(e.status.unprepared, []types.UID{claim.UID}) {
		t.Errorf("status cleared at start for %v, want the claim %s", e.status.unprepared, claim.UID)
	}
	if err := e.preparer.Unprepare(ctx, ref); err != nil {
		t.Fatal(err)
	}
	// The kubelet's retry clears it again (a write that finds nothing).
	if !reflect.DeepEqual(e.status.unprepared, []types.UID{claim.UID, claim.UID}) {
		t.Errorf("status cleared for %v, want the claim %s at start and on the retry", e.status.unprepared, claim.UID)
	}
}

func TestInvalidClaimTouchesNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	_, err := e.preparer.Prepare(ctx, allocated("bad", "gpu-0", "s1", "40Gi", `,"memoryLimit":"30Gi"`))
	var invalid *plan.InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("error %v, want an InvalidError", err)
	}
	if len(e.cdiFiles()) != 0 || len(e.ckpt.Entries()) != 0 {
		t.Error("an invalid claim left state behind")
	}
	if len(e.events.events) != 1 || !strings.Contains(e.events.events[0], "must not be below the guaranteed memory request 40Gi") {
		t.Errorf("events %v", e.events.events)
	}
}

func TestSMSharingWithoutMPSManager(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	e.mps = nil
	e.restart()
	_, err := e.preparer.Prepare(ctx, allocated("sm", "gpu-0", "s1", "16Gi", `,"computeMode":"SMSharing"`))
	if !errors.Is(err, preparer.ErrNoMPS) {
		t.Errorf("got %v, want ErrNoMPS", err)
	}
}

func TestRecoverRollsBackInterruptedPrepares(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	done := allocated("done", "gpu-0", "s1", "10Gi", "")
	if _, err := e.preparer.Prepare(ctx, done); err != nil {
		t.Fatal(err)
	}
	// A crash after the CDI write: a Started entry and its spec on disk.
	crashed, err := plan.Compute(allocated("crashed", "gpu-1", "s2", "10Gi", ""), e.inv, plan.Options{NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ckpt.Put(checkpoint.Entry{State: checkpoint.Started, Plan: *crashed}); err != nil {
		t.Fatal(err)
	}
	w, _ := cdispec.NewWriter(e.cdiDir, cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode})
	if _, err := w.Write(crashed); err != nil {
		t.Fatal(err)
	}
	// And an orphan spec no checkpoint knows.
	orphan := *crashed
	orphan.UID = "orphan"
	if _, err := w.Write(&orphan); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if files := e.cdiFiles(); len(files) != 1 || files[0] != cdispec.SpecName(done.UID) {
		t.Errorf("CDI files after recovery %v, want only the completed claim's", files)
	}
	entries := e.ckpt.Entries()
	if len(entries) != 1 || entries[0].Plan.UID != done.UID {
		t.Errorf("checkpoint after recovery: %+v", entries)
	}
	// The rolled-back attempt may have followed an earlier Prepare whose
	// status is still in the API: it is cleared, the completed claim's
	// status written if missing.
	if !reflect.DeepEqual(e.status.unprepared, []types.UID{crashed.UID}) || !reflect.DeepEqual(e.status.restored, []types.UID{done.UID}) {
		t.Errorf("status at start: cleared %v, restored %v; want %s cleared, %s restored", e.status.unprepared, e.status.restored, crashed.UID, done.UID)
	}
}

func TestConcurrentPrepares(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	var wg sync.WaitGroup
	const n = 40
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			claim := allocated(fmt.Sprintf("c%d", i), fmt.Sprintf("gpu-%d", i%2), fmt.Sprintf("s%d", i), "1Gi", "")
			// Each claim twice at once: the same claim serialises.
			var inner sync.WaitGroup
			for range 2 {
				inner.Go(func() {
					if _, err := e.preparer.Prepare(ctx, claim); err != nil {
						errs[i] = err
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("claim %d: %v", i, err)
		}
	}
	if got := len(e.cdiFiles()); got != n {
		t.Errorf("%d CDI files, want %d", got, n)
	}
	e.restart()
	if got := len(e.preparer.Prepared()); got != n {
		t.Errorf("%d claims prepared after restart, want %d", got, n)
	}
}

// Legacy MPS puts its GPU in EXCLUSIVE_PROCESS, so the modes cannot share
// a GPU there; MPS v3 leaves it in DEFAULT, where they can.
func TestModesMixOnlyUnderMPSv3(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	e.inv.MPSVersion = domain.MPSVersionV3
	e.restart()
	if _, err := e.preparer.Prepare(ctx, allocated("ts", "gpu-0", "s1", "10Gi", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.preparer.Prepare(ctx, allocated("sm", "gpu-0", "s2", "10Gi", `,"computeMode":"SMSharing"`)); err != nil {
		t.Errorf("SMSharing beside TimeSlicing under MPS v3: %v", err)
	}
}

func TestModesNeverMixOnOneLegacyMPSGPU(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t)
	e.inv.MPSVersion = domain.MPSVersionLegacy
	e.restart()
	if _, err := e.preparer.Prepare(ctx, allocated("ts", "gpu-0", "s1", "10Gi", "")); err != nil {
		t.Fatal(err)
	}
	_, err := e.preparer.Prepare(ctx, allocated("sm", "gpu-0", "s2", "10Gi", `,"computeMode":"SMSharing"`))
	var conflict *plan.ModeConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("got %v, want a mode conflict", err)
	}
	if len(e.cdiFiles()) != 1 || len(e.ckpt.Entries()) != 1 || len(e.mps.users) != 0 {
		t.Errorf("the refused claim left state: cdi %v, entries %d, mps %v", e.cdiFiles(), len(e.ckpt.Entries()), e.mps.users)
	}
	// On the other GPU it is fine; once the TimeSlicing claim goes, so is gpu-0.
	if _, err := e.preparer.Prepare(ctx, allocated("sm2", "gpu-1", "s3", "10Gi", `,"computeMode":"SMSharing"`)); err != nil {
		t.Errorf("SMSharing on a free GPU: %v", err)
	}
	ref := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "ts"}, UID: "uid-ts"}
	if err := e.preparer.Unprepare(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := e.preparer.Prepare(ctx, allocated("sm", "gpu-0", "s2", "10Gi", `,"computeMode":"SMSharing"`)); err != nil {
		t.Errorf("after the TimeSlicing claim left: %v", err)
	}
}
