// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package preparer carries out claim preparation on a node: it computes a
// claim's plan, records it in the checkpoint, joins the MPS server for
// SMSharing shares, writes the CDI spec and reports status, and undoes all
// of it on Unprepare. The order makes crashes safe: the checkpoint records
// intent (Started) before any side effect and completion (Completed) after
// the last, so a restarted plugin knows what to finish or roll back, and a
// Prepare that fails leaves no CDI file, no checkpoint entry and no MPS
// reference behind.
package preparer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// MPS manages the per-GPU MPS control daemons SMSharing shares join.
type MPS interface {
	// Acquire makes sure the GPU's daemon runs and is ready, counting the
	// claim as one of its users. It must be idempotent per claim.
	Acquire(ctx context.Context, binding mpslayout.Binding, c *plan.Claim) error
	// Release drops the claim's use; the last user's release stops the
	// daemon. Releasing an unknown claim is not an error.
	Release(ctx context.Context, binding mpslayout.Binding, claimUID types.UID) error
}

// Status receives what was prepared; the claimstatus writer implements it.
type Status interface {
	Prepared(c *plan.Claim)
	// Restored: c was prepared by an earlier process; its status is
	// written if that process never wrote it.
	Restored(c *plan.Claim)
	Unprepared(namespace, name string, uid types.UID)
}

// Events reports failures, and repairs people should know of, on the
// claim object.
type Events interface {
	PrepareFailed(claim *resourceapi.ResourceClaim, err error)
	// CDISpecRestored: the CDI spec of a prepared claim was missing at
	// start, or did not parse (why says which), and was written again
	// from the checkpoint.
	CDISpecRestored(c *plan.Claim, path, why string)
}

// Config holds the preparer's collaborators.
type Config struct {
	Inventory   *domain.Inventory
	PlanOptions plan.Options
	Checkpoint  *checkpoint.Checkpoint
	CDI         *cdispec.Writer
	Status      Status
	Events      Events
	// MPS is nil on nodes where SMSharing cannot run yet; such claims
	// then fail with that reason.
	MPS MPS
	// Pods, when set, reads the pods a claim is reserved for, so Prepare
	// refuses a claim that several of their containers would hold.
	Pods PodGetter
	// Failpoint, when set (tests only), is called at every step boundary
	// of Prepare and Unprepare with the step's name; an error it returns
	// fails the step there, as a crash or an I/O error would.
	Failpoint func(name string) error
}

// Preparer is safe for concurrent use: different claims proceed in
// parallel, calls for the same claim one after the other.
type Preparer struct {
	cfg   Config
	locks *claimLocks
	// admit serialises the mode-conflict check with staging the Started
	// record, so two claims of different modes cannot both pass it for one
	// GPU. The record's file write happens after admit is released.
	admit sync.Mutex
	// inv is the inventory claims are planned against: cfg.Inventory,
	// then a copy with the layout the node has now (SetLayout).
	inv atomic.Pointer[domain.Inventory]
}

// New returns a Preparer. Call Recover before serving the kubelet.
func New(cfg Config) *Preparer {
	p := &Preparer{cfg: cfg, locks: newClaimLocks()}
	p.inv.Store(cfg.Inventory)
	return p
}

// Inventory is the inventory claims are planned against now.
func (p *Preparer) Inventory() *domain.Inventory { return p.inv.Load() }

// SetLayout plans later claims against the node's GPUs and MIG instances
// as they are now (the MIG layout, or a GPU's MIG mode, changed under the
// plugin): gpus are the fraction GPUs, migs the instances, skipped the
// MIG-enabled GPUs without one. Prepared claims are untouched: the caller
// reports those whose device is gone (LostClaims).
func (p *Preparer) SetLayout(gpus []domain.GPU, migs []domain.MIGDevice, skipped []domain.SkippedGPU) {
	inv := *p.inv.Load()
	inv.GPUs, inv.MIGDevices, inv.Skipped = slices.Clone(gpus), slices.Clone(migs), slices.Clone(skipped)
	p.inv.Store(&inv)
}

// Lost is a prepared claim whose devices are gone from the node's layout.
type Lost struct {
	Claim plan.Claim
	// Devices are the claim's shares on devices the node no longer offers.
	Devices []plan.Device
}

// LostClaims are the prepared claims holding a device inv no longer has:
// a MIG instance not among inv.MIGDevices (by device name and UUID: one
// deleted and recreated has a new UUID), or a share of a whole GPU not
// among inv.GPUs (its MIG mode was turned on), with the devices they lost.
func (p *Preparer) LostClaims(inv *domain.Inventory) []Lost {
	var out []Lost
	for _, c := range p.Prepared() {
		lost := Lost{Claim: c}
		for _, d := range c.Devices {
			if d.MIG != nil {
				if m, ok := inv.MIGByName(d.Device); !ok || m.UUID != d.GPU.UUID {
					lost.Devices = append(lost.Devices, d)
				}
			} else if _, ok := inv.GPUByUUID(d.GPU.UUID); !ok {
				lost.Devices = append(lost.Devices, d)
			}
		}
		if len(lost.Devices) > 0 {
			out = append(out, lost)
		}
	}
	return out
}

// ErrNoMPS fails claims whose plan binds them to an MPS server (SMSharing
// shares, and every share on a node with per-cgroup limits and MPS v3)
// where this plugin runs no MPS manager.
var ErrNoMPS = errors.New("the plan makes this claim a client of the managed MPS server (SMSharing, or any share on a node with per-cgroup limits), which this plugin does not run")

func (p *Preparer) failpoint(name string) error {
	if p.cfg.Failpoint == nil {
		return nil
	}
	if err := p.cfg.Failpoint(name); err != nil {
		return fmt.Errorf("failpoint %s: %w", name, err)
	}
	return nil
}

// Prepare prepares one allocated claim and returns its devices for the
// kubelet. A claim prepared before (even by an earlier process) returns the
// same devices without redoing its side effects.
func (p *Preparer) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	// The UID names the CDI spec and the checkpoint entry.
	if err := checkUID(claim.Namespace, claim.Name, claim.UID); err != nil {
		p.report(claim, err)
		return nil, err
	}
	defer p.locks.lock(claim.UID)()

	if entry, ok := p.cfg.Checkpoint.Get(claim.UID); ok {
		if entry.State == checkpoint.Completed {
			return p.resume(ctx, &entry.Plan)
		}
		// An earlier attempt stopped halfway (crash or error): undo it and
		// start over, so every side effect comes from one attempt.
		klog.FromContext(ctx).Info("Rolling back an unfinished earlier Prepare", "claim", klog.KObj(claim), "claimUID", claim.UID)
		if err := p.rollback(ctx, &entry.Plan, false); err != nil {
			return nil, fmt.Errorf("rolling back the unfinished Prepare of claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
	}

	pl, err := plan.Compute(claim, p.Inventory(), p.cfg.PlanOptions)
	if err == nil && pl.MPS() != nil && p.cfg.MPS == nil {
		err = fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, ErrNoMPS)
	}
	if err == nil {
		err = p.checkOneGuarantee(ctx, claim, pl)
	}
	if err != nil {
		p.report(claim, err)
		return nil, err
	}
	if err := p.apply(ctx, pl); err != nil {
		if rbErr := p.rollback(ctx, pl, false); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("rolling back: %w", rbErr))
		}
		p.report(claim, err)
		return nil, err
	}
	if logger := klog.FromContext(ctx).V(2); logger.Enabled() {
		logger.Info("Prepared claim", "claim", klog.KObj(claim), "claimUID", claim.UID, "devices", len(pl.Devices))
	}
	return devices(pl), nil
}

func (p *Preparer) report(claim *resourceapi.ResourceClaim, err error) {
	if p.cfg.Events != nil {
		p.cfg.Events.PrepareFailed(claim, err)
	}
}

// apply performs the side effects of a plan, recording progress.
func (p *Preparer) apply(ctx context.Context, pl *plan.Claim) error {
	if err := p.failpoint("prepare-before-checkpoint-started"); err != nil {
		return err
	}
	if err := p.admitClaim(pl); err != nil {
		return err
	}
	if err := p.failpoint("prepare-after-checkpoint-started"); err != nil {
		return err
	}
	if mps := pl.MPS(); mps != nil {
		if err := p.cfg.MPS.Acquire(ctx, *mps, pl); err != nil {
			return fmt.Errorf("joining the MPS server of GPU %s: %w", mps.GPUUUID, err)
		}
		if err := p.failpoint("prepare-after-mps"); err != nil {
			return err
		}
	}
	if _, err := p.cfg.CDI.Write(pl); err != nil {
		return err
	}
	if err := p.failpoint("prepare-after-cdi-write"); err != nil {
		return err
	}
	if err := p.cfg.Checkpoint.Put(checkpoint.Entry{State: checkpoint.Completed, Plan: *pl}); err != nil {
		return fmt.Errorf("recording completion of claim %s/%s: %w", pl.Namespace, pl.Name, err)
	}
	if err := p.failpoint("prepare-after-checkpoint-completed"); err != nil {
		// Past this point the claim is prepared; a crash here is resumed.
		return err
	}
	p.cfg.Status.Prepared(pl)
	return nil
}

// admitClaim records the start of a Prepare unless the claim's compute
// mode conflicts with a claim prepared (or being prepared) on its GPUs.
// The Started record is staged under admit, so the next claim's check sees
// it, and written after admit is released, so concurrent Prepares share
// the write (group commit) instead of queueing one write each behind admit.
func (p *Preparer) admitClaim(pl *plan.Claim) error {
	persist, err := p.stageStarted(pl)
	if err != nil {
		return err
	}
	if err := persist(); err != nil {
		return fmt.Errorf("recording Prepare of claim %s/%s: %w", pl.Namespace, pl.Name, err)
	}
	return nil
}

func (p *Preparer) stageStarted(pl *plan.Claim) (persist func() error, err error) {
	p.admit.Lock()
	defer p.admit.Unlock()
	var others []plan.Claim
	for _, e := range p.cfg.Checkpoint.Entries() {
		others = append(others, e.Plan)
	}
	if err := plan.CheckModeConflicts(pl, others); err != nil {
		return nil, err
	}
	persist, err = p.cfg.Checkpoint.Stage(checkpoint.Entry{State: checkpoint.Started, Plan: *pl})
	if err != nil {
		return nil, fmt.Errorf("recording Prepare of claim %s/%s: %w", pl.Namespace, pl.Name, err)
	}
	return persist, nil
}

// resume answers a repeated Prepare of a completed claim. Only a CDI spec
// lost since (the CDI root is often a tmpfs), or no longer parsing, is
// written again.
func (p *Preparer) resume(ctx context.Context, pl *plan.Claim) ([]kubeletplugin.Device, error) {
	if _, err := p.rewriteMissingSpec(ctx, pl); err != nil {
		return nil, err
	}
	p.cfg.Status.Prepared(pl)
	return devices(pl), nil
}

// rollback undoes whatever part of pl was applied. Every step tolerates
// work that was never done. With clearStatus the checkpoint also records
// that the claim's status must be cleared (the caller queues the clear),
// in the same commit that forgets the claim, so a restart before the
// clearing write still clears it. Prepare's own rollbacks pass false: the
// claim's status was never written by the attempt they undo.
func (p *Preparer) rollback(ctx context.Context, pl *plan.Claim, clearStatus bool) error {
	var errs []error
	if err := p.cfg.CDI.Remove(pl.UID); err != nil {
		errs = append(errs, err)
	}
	if mps := pl.MPS(); mps != nil && p.cfg.MPS != nil {
		if err := p.cfg.MPS.Release(ctx, *mps, pl.UID); err != nil {
			errs = append(errs, fmt.Errorf("releasing the MPS server of GPU %s: %w", mps.GPUUUID, err))
		}
	}
	if len(errs) > 0 {
		// Keep the entry so that the next attempt retries the cleanup.
		return errors.Join(errs...)
	}
	forget := func() error { return p.cfg.Checkpoint.Delete(pl.UID) }
	if clearStatus {
		forget = func() error {
			return p.cfg.Checkpoint.DeleteClearingStatus(checkpoint.ClaimRef{Namespace: pl.Namespace, Name: pl.Name, UID: pl.UID, Pool: p.pool()})
		}
	}
	if err := forget(); err != nil {
		return fmt.Errorf("forgetting claim %s/%s: %w", pl.Namespace, pl.Name, err)
	}
	return nil
}

// Unprepare undoes Prepare. A claim this node never prepared (or already
// unprepared) succeeds. The claim's status is cleared under the namespace
// and name the checkpoint recorded, never those of the call: the kubelet
// socket's caller names the claim by UID, and a name it adds must not
// steer a clear to another claim.
func (p *Preparer) Unprepare(ctx context.Context, ref kubeletplugin.NamespacedObject) error {
	// The UID arrives as the caller sent it: no claim was read to vouch
	// for it.
	if err := checkUID(ref.Namespace, ref.Name, ref.UID); err != nil {
		return err
	}
	defer p.locks.lock(ref.UID)()

	entry, ok := p.cfg.Checkpoint.Get(ref.UID)
	if !ok {
		return p.unprepareUnknown(ctx, ref)
	}
	if err := p.failpoint("unprepare-before-rollback"); err != nil {
		return err
	}
	if err := p.rollback(ctx, &entry.Plan, true); err != nil {
		return fmt.Errorf("unpreparing claim %s/%s: %w", entry.Plan.Namespace, entry.Plan.Name, err)
	}
	if err := p.failpoint("unprepare-after-rollback"); err != nil {
		return err
	}
	p.cfg.Status.Unprepared(entry.Plan.Namespace, entry.Plan.Name, entry.Plan.UID)
	return nil
}

// unprepareUnknown answers an Unprepare of a claim with no checkpoint
// entry. A spec file may still be an orphan of a crash before the first
// checkpoint write of an older version, or of an entry this version could
// not understand (quarantined), which the kubelet now says is done with.
// Its status is cleared only where a pending-clear record names it (an
// earlier Unprepare of this node whose clearing write was not done yet),
// as that record names it: a claim this node has no record of is another
// node's, or none, and nothing of it is touched.
func (p *Preparer) unprepareUnknown(ctx context.Context, ref kubeletplugin.NamespacedObject) error {
	if err := p.cfg.CDI.Remove(ref.UID); err != nil {
		return err
	}
	if err := p.cfg.Checkpoint.Delete(ref.UID); err != nil {
		return fmt.Errorf("forgetting the quarantined entry of claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if rec, ok := p.cfg.Checkpoint.PendingStatusClear(ref.UID); ok && p.ownPool(ctx, rec) {
		p.cfg.Status.Unprepared(rec.Namespace, rec.Name, rec.UID)
		return nil
	}
	klog.FromContext(ctx).Info("Unprepare of a claim this node holds no record of; no status cleared",
		"claim", klog.KRef(safetext.Cap(ref.Namespace, 64), safetext.Cap(ref.Name, 256)), "claimUID", ref.UID)
	return nil
}

// pool is this node's pool, the only one whose status entries it writes.
func (p *Preparer) pool() string { return p.cfg.PlanOptions.NodeName }

// ownPool tells whether a pending-clear record is this node's to carry
// out: records of format v1 name no pool and are this node's; one naming
// another pool was not written by this node's plugin and is dropped.
func (p *Preparer) ownPool(ctx context.Context, rec checkpoint.ClaimRef) bool {
	if rec.Pool == "" || rec.Pool == p.pool() {
		return true
	}
	klog.FromContext(ctx).Error(nil, "Pending status clear names another node's pool; dropped (a node clears only its own entries)",
		"claim", klog.KRef(rec.Namespace, rec.Name), "claimUID", rec.UID, "pool", safetext.Cap(rec.Pool, 256), "ownPool", p.pool())
	p.cfg.Checkpoint.StatusCleared(rec.UID)
	return false
}

// Recover makes the node consistent after a restart: claims whose Prepare
// stopped halfway are rolled back, and CDI specs no checkpoint entry
// accounts for are removed. Completed claims are kept; a CDI spec of one
// that is missing (the CDI root is often a tmpfs) is written again, with
// an Event, since a container of the claim restarting needs it. Claim
// status is reconciled with the checkpoint: each prepared claim's status
// is written if an earlier process was killed before writing it, and the
// status of every claim unprepared (or rolled back) whose clearing write
// was not done is cleared. Nothing is removed for an entry that could not
// be understood (quarantined), nor anything at all when the checkpoint
// could not be read: the kubelet's Unprepare removes those specs when
// their pods end.
func (p *Preparer) Recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	p.quarantineOutOfBounds(ctx)
	p.cfg.CDI.RemoveLeftovers(logger)
	known := map[types.UID]bool{}
	for _, q := range p.cfg.Checkpoint.Quarantined() {
		known[q.UID] = true
	}
	unreadable := p.cfg.Checkpoint.Unreadable()
	var errs []error
	for _, e := range p.cfg.Checkpoint.Entries() {
		if e.State == checkpoint.Completed {
			known[e.Plan.UID] = true
			why, err := p.rewriteMissingSpec(ctx, &e.Plan)
			if err != nil {
				errs = append(errs, err)
			}
			if why != "" && p.cfg.Events != nil {
				p.cfg.Events.CDISpecRestored(&e.Plan, p.cfg.CDI.Path(e.Plan.UID), why)
			}
			p.cfg.Status.Restored(&e.Plan)
			continue
		}
		logger.Info("Rolling back a Prepare interrupted by a restart", "claim", klog.KRef(e.Plan.Namespace, e.Plan.Name), "claimUID", e.Plan.UID)
		if err := p.rollback(ctx, &e.Plan, true); err != nil {
			errs = append(errs, err)
		}
	}
	// Rolled back above, or unprepared by an earlier process that stopped
	// before its clearing write.
	for _, ref := range p.cfg.Checkpoint.PendingStatusClears() {
		if !p.ownPool(ctx, ref) {
			continue
		}
		logger.V(2).Info("Clearing the status of a claim no longer prepared here", "claim", klog.KRef(ref.Namespace, ref.Name), "claimUID", ref.UID)
		p.cfg.Status.Unprepared(ref.Namespace, ref.Name, ref.UID)
	}
	specs, err := p.cfg.CDI.List()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, uid := range specs {
		if known[uid] {
			continue
		}
		if _, ok := p.cfg.Checkpoint.Get(uid); ok {
			continue // a rollback above failed and kept its entry
		}
		if unreadable != "" {
			logger.Info("Keeping a CDI spec no readable checkpoint entry accounts for: the checkpoint was unreadable", "claimUID", uid, "checkpoint", unreadable)
			continue
		}
		logger.Info("Removing a CDI spec no prepared claim accounts for", "claimUID", uid)
		if err := p.cfg.CDI.Remove(uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rewriteMissingSpec writes the CDI spec of a prepared claim again if it
// is missing (the CDI root is often a tmpfs) or does not parse as a CDI
// spec (torn, edited), and says why it did ("" when it did not).
func (p *Preparer) rewriteMissingSpec(ctx context.Context, pl *plan.Claim) (string, error) {
	state, err := p.cfg.CDI.Check(pl.UID)
	var why string
	switch {
	case state == cdispec.SpecMissing:
		why = "was missing"
	case state == cdispec.SpecUnreadable:
		why = "did not parse as a CDI spec (" + err.Error() + ")"
	case err != nil:
		return "", fmt.Errorf("checking the CDI spec of claim %s/%s: %w", pl.Namespace, pl.Name, err)
	default:
		return "", nil
	}
	if _, err := p.cfg.CDI.Write(pl); err != nil {
		return "", fmt.Errorf("writing the CDI spec of claim %s/%s again: %w", pl.Namespace, pl.Name, err)
	}
	klog.FromContext(ctx).Info("CDI spec of a prepared claim written again from the checkpoint", "claim", klog.KRef(pl.Namespace, pl.Name), "claimUID", pl.UID, "path", p.cfg.CDI.Path(pl.UID), "reason", why)
	return why, nil
}

// quarantineOutOfBounds sets aside, as entries this release cannot
// understand are, every checkpoint entry that fails the bounds of a fresh
// Prepare (plan.CheckRecorded), or whose shares would fill one of its GPUs
// beyond what it offers together with the entries before it (UID order):
// a checksum shows a file is whole, not that what it holds is sane.
func (p *Preparer) quarantineOutOfBounds(ctx context.Context) {
	logger := klog.FromContext(ctx)
	used := map[string]int64{}
	for _, e := range p.cfg.Checkpoint.Entries() {
		err := plan.CheckRecorded(&e.Plan, p.Inventory(), p.cfg.PlanOptions)
		if err == nil {
			err = p.fits(&e.Plan, used)
		}
		if err == nil {
			for _, d := range e.Plan.Devices {
				if d.MIG == nil {
					used[d.GPU.UUID] += d.SoftLimitBytes
				}
			}
			continue
		}
		reason := safetext.Cap("outside the bounds of a fresh Prepare: "+err.Error(), 2048)
		logger.Error(err, "Checkpoint entry outside the bounds of a fresh Prepare; quarantined: kept as it is, its CDI spec and MPS daemon are not removed", "claimUID", e.Plan.UID)
		p.cfg.Checkpoint.Quarantine(e.Plan.UID, reason)
	}
}

// fits tells whether pl's shares fit, per GPU, in what the GPU offers
// beside used (the entries accepted so far).
func (p *Preparer) fits(pl *plan.Claim, used map[string]int64) error {
	mine := map[string]int64{}
	for _, d := range pl.Devices {
		if d.MIG == nil {
			mine[d.GPU.UUID] += d.SoftLimitBytes
		}
	}
	for uuid, n := range mine {
		gpu, _ := p.Inventory().GPUByUUID(uuid)
		offered := domain.PublishedMemory(gpu.MemoryBytes)
		if used[uuid]+n > offered.Value() {
			return fmt.Errorf("with the claims recorded before it, GPU %s would guarantee %d bytes, more than the %d it offers", uuid, used[uuid]+n, offered.Value())
		}
	}
	return nil
}

// Uncertain says why the preparer cannot name every claim this node
// serves (an unreadable checkpoint, or entries quarantined because this
// version does not understand them), or "" when it can. While it is
// uncertain, nothing may be removed for not being in use: the MPS manager
// keeps daemons no known claim uses.
func (p *Preparer) Uncertain() string {
	if r := p.cfg.Checkpoint.Unreadable(); r != "" {
		return "the checkpoint was unreadable at start (" + r + ")"
	}
	if q := p.cfg.Checkpoint.Quarantined(); len(q) > 0 {
		uids := make([]string, len(q))
		for i, e := range q {
			uids[i] = string(e.UID)
		}
		return fmt.Sprintf("%d checkpoint entries are quarantined (claims %s): written by a version this one does not understand", len(q), strings.Join(uids, ", "))
	}
	return ""
}

// Prepared returns the plans of every prepared claim, for metrics and the
// MPS reference counts.
func (p *Preparer) Prepared() []plan.Claim {
	var out []plan.Claim
	for _, e := range p.cfg.Checkpoint.Entries() {
		if e.State == checkpoint.Completed {
			out = append(out, e.Plan)
		}
	}
	return out
}

// checkUID refuses a claim UID that could not be one before anything is
// named after it.
func checkUID(namespace, name string, uid types.UID) error {
	if plan.ValidUID(string(uid)) {
		return nil
	}
	return fmt.Errorf("claim %s/%s: uid %q is not a UID (lowercase letters, digits and '-', at most 63); nothing named after it is touched",
		namespace, name, safetext.Cap(string(uid), 128))
}

func devices(pl *plan.Claim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, len(pl.Devices))
	for i, d := range pl.Devices {
		out[i] = kubeletplugin.Device{
			Requests:     []string{d.Request},
			PoolName:     d.Pool,
			DeviceName:   d.Device,
			CDIDeviceIDs: []string{cdispec.DeviceID(pl.UID, d)},
			ShareID:      d.ShareID,
		}
	}
	return out
}
