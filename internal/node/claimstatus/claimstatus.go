// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package claimstatus publishes what the plugin did with each claim in the
// claim's status.devices, so `kubectl describe resourceclaim` shows the GPU,
// the guaranteed memory, the limit, the compute mode and how the limit is
// enforced. Writes replace this driver's entries and keep other drivers'
// (read, modify, update with conflict retries), made from a work queue so
// Prepare never waits for them: the latest desired state of a claim wins,
// and failures retry with backoff. (Server-side apply of status.devices
// alone was refused by kube-apiserver v1.37.2 for some claims with
// "status.allocation: Invalid value: null: field cannot be modified once
// set", forever; an update of the object as read has no such failure.)
//
// RBAC (Kubernetes 1.37, granular status authorization): get on
// resourceclaims, update on resourceclaims/status, and verb
// "associated-node:update" on the synthetic subresource
// resourceclaims/driver with resourceNames [gpufrac.dev] (the plugin's
// service account token is bound to its node; "arbitrary-node:update" would
// allow writing claims of other nodes and is not needed).
package claimstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// ConditionReady is the condition set on every prepared share.
const ConditionReady = "Ready"

// ConditionMPSServerReady is set on SMSharing shares once their GPU's MPS
// daemon has died: False while it is being recreated (the share's CUDA
// contexts on it are lost), True again when the new one is ready.
const ConditionMPSServerReady = "MPSServerReady"

// Data renders a share's status data.
func Data(d plan.Device) domain.DeviceData {
	out := domain.DeviceData{
		UUID:                   d.GPU.UUID,
		MemoryRequest:          quantity(d.SoftLimitBytes),
		MemoryLimit:            quantity(d.HardLimitBytes),
		ComputeMode:            string(d.ComputeMode),
		Enforcement:            string(d.Enforcement),
		ActiveThreadPercentage: d.ActiveThreadPercentage,
	}
	if d.MPS != nil {
		out.MPSServer = d.MPS.ClientPipeDir()
	}
	if d.AdminAccess {
		out.AdminAccess, out.Enforced = true, domain.AdminEnforced
		return out
	}
	mps := domain.MPSVersionNone
	if d.MPS != nil && d.MPS.Version == domain.MPSVersionV3 {
		mps = domain.MPSVersionV3
	}
	out.Enforced = domain.ShareEnforced(d.Enforcement, string(d.ComputeMode), mps)
	return out
}

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

// readyMessage says in one line what the share got.
func readyMessage(d plan.Device) string {
	switch {
	case d.AdminAccess:
		return fmt.Sprintf("GPU %s for monitoring (adminAccess): device node and driver files; no memory limit, no MPS, not counted in the GPU's guaranteed memory", d.GPU.UUID)
	case d.Enforcement == domain.EnforcementNone:
		return fmt.Sprintf("%s guaranteed by the scheduler on GPU %s, %s; no hard limit on this node (no per-cgroup limits: driver before r615, or cgroup v1)", quantity(d.SoftLimitBytes), d.GPU.UUID, d.ComputeMode)
	case d.Enforcement == domain.EnforcementMPS:
		return fmt.Sprintf("%s guaranteed by the scheduler, %s legacy MPS pinned limit on GPU %s, %s; a tenant can undo that limit (no per-cgroup limits on this node)",
			quantity(d.SoftLimitBytes), quantity(d.HardLimitBytes), d.GPU.UUID, d.ComputeMode)
	default:
		return fmt.Sprintf("%s guaranteed, %s limit enforced by %s on GPU %s, %s",
			quantity(d.SoftLimitBytes), quantity(d.HardLimitBytes), d.Enforcement, d.GPU.UUID, d.ComputeMode)
	}
}

// DeviceStatuses are the status.devices entries of this driver for c; nil
// c (or no devices) means none.
func DeviceStatuses(c *plan.Claim, now time.Time) ([]resourceapi.AllocatedDeviceStatus, error) {
	return deviceStatuses(c, nil, now)
}

func deviceStatuses(c *plan.Claim, mps *domain.MPSServer, now time.Time) ([]resourceapi.AllocatedDeviceStatus, error) {
	if c == nil {
		return nil, nil
	}
	out := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.Devices))
	for _, d := range c.Devices {
		data, err := json.Marshal(Data(d))
		if err != nil {
			return nil, fmt.Errorf("encoding status data: %w", err)
		}
		dev := resourceapi.AllocatedDeviceStatus{
			Driver: v1alpha1.DriverName, Pool: d.Pool, Device: d.Device,
			Data: &runtime.RawExtension{Raw: data},
			Conditions: []metav1.Condition{{
				Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Prepared",
				Message: readyMessage(d), LastTransitionTime: metav1.NewTime(now),
			}},
		}
		if d.MPS != nil && mps != nil {
			status := metav1.ConditionFalse
			if mps.Ready {
				status = metav1.ConditionTrue
			}
			dev.Conditions = append(dev.Conditions, metav1.Condition{
				Type: ConditionMPSServerReady, Status: status, Reason: mps.Reason,
				Message: mps.Message, LastTransitionTime: metav1.NewTime(mps.Since),
			})
		}
		if d.ShareID != nil {
			dev.ShareID = ptr.To(string(*d.ShareID))
		}
		out = append(out, dev)
	}
	return out, nil
}

type key struct {
	namespace, name string
	uid             types.UID
}

// desired is what a claim's status should say; a nil claim clears it.
type desired struct {
	claim *plan.Claim
	mps   *domain.MPSServer
	// notBefore delays a clear (see SetClearDelay); zero for writes made
	// as soon as a worker is free.
	notBefore time.Time
	// ifMissing writes claim's entries only where the claim has none of
	// this driver's (Restored): what an earlier process wrote, MPS and
	// incident conditions included, is kept.
	ifMissing bool
	// deferUntil, set on a Prepared write during a burst (burst.go), is
	// the latest it waits for the burst to end.
	deferUntil time.Time
}

// Writer applies claim status in the background.
type Writer struct {
	client       kubernetes.Interface
	fieldManager string
	// pool is this node's pool: the only entries this writer replaces or
	// clears. A claim's other entries (another node's shares of it) were
	// written by that node, and a clear or forged call here must not
	// reach them.
	pool  string
	queue workqueue.TypedRateLimitingInterface[key]

	mu      sync.Mutex
	desired map[key]desired
	// seen is the latest claim object known for a key (the kubelet
	// helper's read at Prepare, then this writer's own update), so a
	// status write is one UpdateStatus instead of a GET and an update; a
	// conflict falls back to the GET. Guarded by mu.
	seen map[key]*resourceapi.ResourceClaim
	// incidents are conditions set by SetShareCondition, kept through
	// later rewrites of the claim's status (incidents.go).
	incidents map[key]map[shareCondition]metav1.Condition

	failpoint func(name string) error
	// onCleared learns of each clear written (SetOnCleared).
	onCleared func(uid types.UID)
	// clearDelay holds back the clearing write of an unprepared claim
	// (SetClearDelay); flushTimeout bounds the writes of what is still
	// pending when Run ends.
	clearDelay   time.Duration
	flushTimeout time.Duration
	// burstQuiet and burstMax hold back Prepared writes while Prepares
	// keep arriving (SetBurst); lastPrepared is when the latest one did
	// (guarded by mu).
	burstQuiet, burstMax time.Duration
	lastPrepared         time.Time
	// now is time.Now, replaceable in tests.
	now func() time.Time
}

// SetFailpoint installs a crash-test hook called after every successful
// status write ("status-after-write"); see preparer.Config.Failpoint. Call
// it before Run.
func (w *Writer) SetFailpoint(f func(name string) error) {
	w.failpoint = f
}

// NewWriter writes as fieldManager (one per node, so nodes never fight over
// each other's entries) the entries of pool (the node's) alone.
func NewWriter(client kubernetes.Interface, fieldManager, pool string) *Writer {
	return &Writer{
		client:       client,
		fieldManager: fieldManager,
		pool:         pool,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "gpufrac-claim-status"}),
		desired:      map[key]desired{},
		seen:         map[key]*resourceapi.ResourceClaim{},
		flushTimeout: DefaultFlushTimeout,
		now:          time.Now,
	}
}

// Seen offers a claim object just read from the API server (the kubelet
// helper reads each claim before Prepare) as the base of the claim's next
// status write, unless a newer one (this writer's own update) is known.
// The object is not modified.
func (w *Writer) Seen(claim *resourceapi.ResourceClaim) {
	k := key{claim.Namespace, claim.Name, claim.UID}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[k]; !ok {
		w.seen[k] = claim
	}
}

// ForgetSeen drops what Seen offered, for a claim whose Prepare failed and
// so gets no status write.
func (w *Writer) ForgetSeen(namespace, name string, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.seen, key{namespace, name, uid})
}

// takeSeen returns a copy of the known object of k, forgetting it: it is
// either updated (and the result stored again) or found stale.
func (w *Writer) takeSeen(k key) *resourceapi.ResourceClaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	claim, ok := w.seen[k]
	if !ok {
		return nil
	}
	delete(w.seen, k)
	return claim.DeepCopy()
}

// SetOnCleared installs f, called with a claim's UID once its clearing
// write is done (or found unnecessary: the claim is gone or was
// recreated), so that the record kept for a restart can go
// (checkpoint.StatusCleared). Call it before Run.
func (w *Writer) SetOnCleared(f func(uid types.UID)) {
	w.onCleared = f
}

// Prepared records that c is prepared; the status follows, after the
// burst of Prepares it came in (SetBurst).
func (w *Writer) Prepared(c *plan.Claim) {
	k := key{c.Namespace, c.Name, c.UID}
	if w.burstQuiet <= 0 {
		w.set(k, desired{claim: c})
		return
	}
	w.mu.Lock()
	now := w.now()
	w.lastPrepared = now
	w.desired[k] = desired{claim: c, deferUntil: now.Add(w.burstMax)}
	w.mu.Unlock()
	w.queue.AddAfter(k, w.burstQuiet)
}

// Restored asks for c's status at start, for a claim an earlier process
// prepared: written only if the claim has no entries of this driver (the
// earlier process was killed before its write), so conditions it set are
// kept. Anything already queued for the claim wins.
func (w *Writer) Restored(c *plan.Claim) {
	k := key{c.Namespace, c.Name, c.UID}
	w.mu.Lock()
	if _, queued := w.desired[k]; queued {
		w.mu.Unlock()
		return
	}
	w.desired[k] = desired{claim: c, ifMissing: true}
	w.mu.Unlock()
	w.queue.Add(k)
}

// Unprepared records that a claim is no longer prepared here. With a
// clear delay the write waits for it (coalesce.go); the copy Seen or the
// last update left is dropped, as after the delay it is likely stale (a
// short job's claim is deleted or deallocated by then), so the clear reads
// the claim afresh.
func (w *Writer) Unprepared(namespace, name string, uid types.UID) {
	k := key{namespace, name, uid}
	if w.clearDelay <= 0 {
		w.set(k, desired{})
		return
	}
	w.mu.Lock()
	w.desired[k] = desired{notBefore: w.now().Add(w.clearDelay)}
	delete(w.seen, k)
	w.mu.Unlock()
	w.queue.AddAfter(k, w.clearDelay)
}

// MPSServerState records the state of prepared claim c's MPS server.
func (w *Writer) MPSServerState(c *plan.Claim, state domain.MPSServer) {
	w.set(key{c.Namespace, c.Name, c.UID}, desired{claim: c, mps: &state})
}

func (w *Writer) set(k key, d desired) {
	w.mu.Lock()
	w.desired[k] = d
	w.mu.Unlock()
	w.queue.Add(k)
}

// Run applies queued changes until ctx ends.
func (w *Writer) Run(ctx context.Context, workers int) {
	defer w.queue.ShutDown()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, w.work, time.Second)
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	w.flush(ctx)
}

func (w *Writer) work(ctx context.Context) {
	for w.processNext(ctx) {
	}
}

func (w *Writer) processNext(ctx context.Context) bool {
	k, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(k)
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(k.namespace, k.name), "claimUID", k.uid)

	w.mu.Lock()
	d, ok := w.desired[k]
	w.mu.Unlock()
	if !ok {
		// Written already: a delayed clear's timer fired after a
		// re-prepare's write replaced and completed it.
		w.queue.Forget(k)
		return true
	}
	if wait := d.notBefore.Sub(w.now()); d.claim == nil && wait > 0 {
		// A clear queued early (the key was queued already, or a retry).
		w.queue.AddAfter(k, wait)
		return true
	}
	if wait := w.burstWait(d); wait > 0 {
		w.queue.AddAfter(k, wait)
		return true
	}

	err := w.apply(ctx, k.namespace, k.name, k.uid, d)
	if err == nil && w.failpoint != nil {
		// A returned error is treated like a failed write: retried.
		err = w.failpoint("status-after-write")
	}
	switch {
	case err == nil || apierrors.IsNotFound(err):
		// A claim that is gone has no status to keep.
		w.done(k, d)
		w.queue.Forget(k)
	default:
		logger.Error(err, "Updating claim status failed; will retry", "attempt", w.queue.NumRequeues(k)+1)
		w.queue.AddRateLimited(k)
	}
	return true
}

// done forgets d, written, unless something newer is wanted for k since,
// and reports a clear written.
func (w *Writer) done(k key, d desired) {
	w.mu.Lock()
	current := w.desired[k] == d
	if current {
		delete(w.desired, k)
	}
	w.mu.Unlock()
	if current && d.claim == nil && w.onCleared != nil {
		w.onCleared(k.uid)
	}
}

// Apply writes the status of one claim now: it replaces this driver's
// entries of this node's pool and keeps every other entry, read-modify-write with retries on
// conflicts. A claim recreated under the same name (another UID) is not
// ours to write.
func (w *Writer) Apply(ctx context.Context, namespace, name string, uid types.UID, c *plan.Claim) error {
	return w.apply(ctx, namespace, name, uid, desired{claim: c})
}

func (w *Writer) apply(ctx context.Context, namespace, name string, uid types.UID, d desired) error {
	want, err := deviceStatuses(d.claim, d.mps, time.Now())
	if err != nil {
		return err
	}
	want = w.withIncidents(key{namespace, name, uid}, d.claim, want)
	claims := w.client.ResourceV1().ResourceClaims(namespace)
	k := key{namespace, name, uid}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		claim := w.takeSeen(k)
		if claim == nil {
			var err error
			if claim, err = claims.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		if claim.UID != uid {
			return nil
		}
		ours := slices.DeleteFunc(slices.Clone(claim.Status.Devices), func(d resourceapi.AllocatedDeviceStatus) bool {
			return !w.owns(d)
		})
		if d.ifMissing && (len(ours) > 0 || claim.Status.Allocation == nil) {
			// Written already (kept as it is), or deallocated since: the
			// kubelet's Unprepare follows and clears.
			return nil
		}
		want = keepTransitionTimes(ours, want)
		if upToDate(ours, want) {
			if d.claim != nil {
				w.mu.Lock()
				if _, ok := w.seen[k]; !ok {
					w.seen[k] = claim
				}
				w.mu.Unlock()
			}
			return nil
		}
		devices := slices.DeleteFunc(slices.Clone(claim.Status.Devices), w.owns)
		devices = append(devices, want...)
		claim.Status.Devices = devices
		updated, err := claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: w.fieldManager})
		if err == nil && d.claim != nil {
			// Still prepared: the base of its next write (Unprepare's).
			w.mu.Lock()
			w.seen[k] = updated
			w.mu.Unlock()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("writing status of claim %s/%s: %w", namespace, name, err)
	}
	return nil
}

// owns tells whether d is this writer's to replace or clear: this
// driver's entry in this node's pool.
func (w *Writer) owns(d resourceapi.AllocatedDeviceStatus) bool {
	return d.Driver == v1alpha1.DriverName && d.Pool == w.pool
}

// Pending is the number of claims whose status is not written yet.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.desired)
}
