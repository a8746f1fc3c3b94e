// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/internal/node/fractionmetrics"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/internal/node/preparer"
)

// The steps of Start after the instance lock is held and the checkpoint
// open, in the order Start runs them. Each starts its background work
// under bgCtx and p.done, so Stop ends it; cfg is Start's, whose CDI
// record directory is set.

// startStatus starts the writer of the claims' status.devices and the
// event reporter that shares its claims.
func (p *Plugin) startStatus(bgCtx context.Context, cfg Config, ckpt *checkpoint.Checkpoint) {
	status := claimstatus.NewWriter(cfg.KubeClient, v1alpha1.DriverName+"/"+cfg.NodeName, cfg.NodeName)
	status.SetFailpoint(cfg.Failpoint)
	status.SetClearDelay(cfg.StatusClearDelay)
	status.SetBurst(cfg.StatusBurstQuiet, claimstatus.DefaultBurstMax)
	// A clear written no longer needs its record for a restart.
	status.SetOnCleared(ckpt.StatusCleared)
	p.status = status
	p.events = newEventReporter(bgCtx, cfg.KubeClient, cfg.NodeName, status)
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		status.Run(bgCtx, 4)
	}()
}

// newPreparer builds the MPS daemon manager (nil where the node runs no
// MPS) and the preparer, and recovers the claims the checkpoint holds.
func (p *Plugin) newPreparer(ctx, bgCtx context.Context, cfg Config, ckpt *checkpoint.Checkpoint, cdi *cdispec.Writer) (*mps.Manager, error) {
	// The preparer is built below; until then nothing is uncertain.
	var uncertain func() string
	// A node server started now serves the fraction GPUs the preparer
	// plans against now (the MIG layout may change them).
	serverGPUs := func() []string {
		var uuids []string
		for _, g := range p.preparer.Inventory().GPUs {
			uuids = append(uuids, g.UUID)
		}
		slices.Sort(uuids)
		return uuids
	}
	mpsManager, err := newMPSManager(ctx, cfg, p.inventory, p.events, func() string { return uncertain() }, serverGPUs)
	if err != nil {
		return nil, err
	}
	pcfg := preparer.Config{
		Inventory:   p.inventory,
		PlanOptions: plan.Options{NodeName: cfg.NodeName, MPSRoot: filepath.Join(cfg.PluginDataDir, "mps"), MPSServerScope: p.inventory.MPSServerScope},
		Checkpoint:  ckpt,
		CDI:         cdi,
		Status:      p.status,
		Events:      p.events,
		Failpoint:   cfg.Failpoint,
		Pods:        newPodLookup(bgCtx, cfg.KubeClient, cfg.NodeName).getter(),
	}
	// A nil *mps.Manager in the interface would not read as "no MPS".
	if mpsManager != nil {
		pcfg.MPS = mpsManager
	}
	p.preparer = preparer.New(pcfg)
	uncertain = p.preparer.Uncertain
	if err := p.preparer.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recovering prepared claims from the checkpoint: %w", err)
	}
	return mpsManager, nil
}

// startMetrics builds the per-fraction metrics, registers them where cfg
// asks (pruning the container records they read), and starts watching
// for memory incidents.
func (p *Plugin) startMetrics(bgCtx context.Context, cfg Config, ckpt *checkpoint.Checkpoint, mpsManager *mps.Manager) error {
	var mpsDaemons func() map[string]int
	var mpsReady func() map[string]bool
	if mpsManager != nil {
		mpsDaemons, mpsReady = mpsManager.Users, mpsManager.Ready
	}
	usage := usageNVML(bgCtx, cfg.NVML)
	p.metrics = fractionmetrics.New(fractionmetrics.Config{
		NodeName: cfg.NodeName, Inventory: p.inventory, Current: p.preparer.Inventory, Prepared: p.preparer.Prepared,
		RecordDir: cfg.CDI.RecordDir, NVML: usage, MPSDaemons: mpsDaemons,
		CgroupRoot:  cfg.InventoryOptions.CgroupRoot,
		Quarantined: func() int { return len(ckpt.Quarantined()) },
		MPSReady:    mpsReady, Unhealthy: p.unhealthyReasons,
	})
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(p.metrics); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
		// Scrapes only read the hook's container records; this removes
		// those of containers and claims that are gone.
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			p.metrics.RunPruner(bgCtx, time.Minute)
		}()
	}
	var mpsSource any
	if mpsManager != nil {
		mpsSource = mpsManager
	}
	p.watchIncidents(bgCtx, usage, cfg.CDI.RecordDir, mpsSource)
	return nil
}

// unhealthyReasons are the GPUs the health monitor holds unhealthy (and
// the slices taint), with the taint's reason.
func (p *Plugin) unhealthyReasons() map[string]string {
	out := map[string]string{}
	for uuid, st := range p.health.Unhealthy() {
		out[uuid] = st.Reason
	}
	return out
}

// runMPS brings the MPS daemons in line with the recovered claims and
// keeps them so in the background.
func (p *Plugin) runMPS(ctx, bgCtx context.Context, mpsManager *mps.Manager) {
	// Reference counts come from the checkpoint; daemons of GPUs no
	// claim uses any more go, missing ones come back.
	if err := mpsManager.Restore(ctx, p.preparer.Prepared()); err != nil {
		klog.FromContext(ctx).Error(err, "Reconciling MPS daemons at start; retrying in the background")
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		mpsManager.Run(bgCtx, 10*time.Second)
	}()
}

// usageNVML opens NVML for the plugin's lifetime so that each scrape reads
// usage without initialising the library; nil (no usage series) if it
// cannot.
func usageNVML(ctx context.Context, lib nvml.Interface) nvml.Interface {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		klog.FromContext(ctx).Info("Per-container GPU memory usage is not collected", "reason", ret.Error())
		return nil
	}
	go func() {
		<-ctx.Done()
		_ = lib.Shutdown()
	}()
	return lib
}
