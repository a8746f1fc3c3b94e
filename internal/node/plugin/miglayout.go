// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// MIGLayoutInterval is how often the plugin reads the node's MIG layout
// from NVML while it runs (and it reads it at every start). MIG instances
// are created and deleted by an operator or the GPU Operator's MIG
// manager, not by gpufrac; a change is noticed within this interval.
const MIGLayoutInterval = 30 * time.Second

// watchMIGLayout checks the MIG layout every MIGLayoutInterval.
func (p *Plugin) watchMIGLayout(ctx context.Context) {
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		ticker := time.NewTicker(MIGLayoutInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			if err := p.CheckMIGLayout(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Reading the MIG layout; the slice keeps the last one read")
			}
		}
	}()
}

// CheckMIGLayout reads the MIG layout once and, if it changed, plans new
// claims against it, republishes the slice and reports every prepared
// claim whose instance is gone (an error in the log, a MIGInstanceLost
// Event on the claim, gpufrac_mig_instances_lost_total): such a claim is
// never dropped silently, and Unprepare still cleans it up.
func (p *Plugin) CheckMIGLayout(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	now, err := nvmldiscovery.MIGLayout(ctx, p.cfg.NVML, p.cfg.InventoryOptions)
	if err != nil {
		return err
	}
	inv := p.preparer.Inventory()
	// A GPU that serves fractions and had MIG turned on under the plugin
	// keeps serving fractions until the plugin restarts and rediscovers
	// it: offering its instances too would count its memory twice.
	kept := now[:0:0]
	for _, m := range now {
		if _, fraction := inv.GPUByUUID(m.Parent.UUID); fraction {
			logger.Info("MIG is on for a GPU that was discovered without it; its instances are offered after the plugin restarts", "gpu", m.Parent.UUID, "instance", m.Name())
			continue
		}
		kept = append(kept, m)
	}
	change := domain.CompareMIGLayouts(inv.MIGDevices, kept)
	if change.Empty() {
		return nil
	}
	logger.Info("The MIG layout changed; republishing the slice", "added", change.Added, "removed", change.Removed)
	p.preparer.SetMIGDevices(kept)
	for _, lost := range p.preparer.MIGLostClaims(kept) {
		for _, d := range lost.Devices {
			logger.Error(nil, "A prepared claim's MIG instance is gone", "claim", klog.KRef(lost.Claim.Namespace, lost.Claim.Name),
				"claimUID", lost.Claim.UID, "device", d.Device, "uuid", d.GPU.UUID, "profile", d.MIG.Profile)
			if p.events != nil {
				p.events.MIGInstanceLost(&lost.Claim, d.Device, d.GPU.UUID, d.MIG.Profile)
			}
		}
		p.metrics.ObserveMIGLost(len(lost.Devices))
	}
	return p.republish(ctx)
}

// republish publishes the slices of the inventory claims are planned
// against, with the GPUs health reports unhealthy tainted.
func (p *Plugin) republish(ctx context.Context) error {
	unhealthy := map[string]string{}
	if p.health != nil {
		for uuid, st := range p.health.Unhealthy() {
			unhealthy[uuid] = st.Reason
		}
	}
	_, err := p.publish(ctx, unhealthy)
	return err
}
