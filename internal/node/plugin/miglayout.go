// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/node/preparer"
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

// CheckMIGLayout reads the node's layout once (which GPUs have MIG mode
// on, and their instances) and, if it changed, plans new claims against
// it and republishes the slice: a GPU whose MIG mode was turned on stops
// serving fractions and offers its instances, one whose MIG mode was
// turned off serves fractions. Every prepared claim whose device is gone
// is reported, never dropped silently (reportLost); Unprepare still
// cleans it up.
func (p *Plugin) CheckMIGLayout(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	p.mig.mu.Lock()
	defer p.mig.mu.Unlock()
	layout, err := nvmldiscovery.ReadLayout(ctx, p.cfg.NVML, p.cfg.InventoryOptions)
	if err != nil {
		return err
	}
	inv := p.preparer.Inventory()
	gpus, toMIG, fromMIG, err := p.fractionGPUs(ctx, inv, layout)
	if err != nil {
		return err
	}
	change := domain.CompareMIGLayouts(inv.MIGDevices, layout.MIGDevices)
	if change.Empty() && len(toMIG) == 0 && len(fromMIG) == 0 {
		// A Prepare that planned against the layout before the last
		// change may have finished after that change's report.
		p.reportLost(ctx, p.preparer.LostClaims(inv))
		return nil
	}
	for _, g := range toMIG {
		logger.Info("MIG mode was turned on for a GPU that served fractions; it now offers its MIG instances instead", "gpu", g.UUID, "device", domain.DeviceName(g.Index))
	}
	for _, g := range fromMIG {
		logger.Info("MIG mode was turned off for a GPU; it now serves fractions", "gpu", g.UUID, "device", domain.DeviceName(g.Index))
	}
	logger.Info("The MIG layout changed; republishing the slice", "added", change.Added, "removed", change.Removed,
		"gpusToMIG", len(toMIG), "gpusFromMIG", len(fromMIG))
	p.preparer.SetLayout(gpus, layout.MIGDevices, layout.Skipped)
	p.reportLost(ctx, p.preparer.LostClaims(p.preparer.Inventory()))
	return p.republish(ctx)
}

// fractionGPUs are the GPUs that serve fractions after layout: those of
// inv whose MIG mode is still off (as they were discovered), and those
// whose MIG mode was turned off since (fromMIG), with the compute modes
// and MPS server reserve the plugin's flags give them. toMIG are the
// fraction GPUs of inv whose MIG mode is on now. A GPU the read does not
// list at all stays as it was: a failed read must not empty the slice.
func (p *Plugin) fractionGPUs(ctx context.Context, inv *domain.Inventory, layout nvmldiscovery.Layout) (gpus, toMIG, fromMIG []domain.GPU, err error) {
	migOn := map[string]bool{}
	for _, m := range layout.MIGDevices {
		migOn[m.Parent.UUID] = true
	}
	for _, s := range layout.Skipped {
		migOn[s.UUID] = true
	}
	wasMIG := map[string]bool{}
	for _, m := range inv.MIGDevices {
		wasMIG[m.Parent.UUID] = true
	}
	for _, s := range inv.Skipped {
		wasMIG[s.UUID] = true
	}
	for _, g := range inv.GPUs {
		if migOn[g.UUID] {
			toMIG = append(toMIG, g)
			continue
		}
		gpus = append(gpus, g)
	}
	for _, g := range layout.GPUs {
		if _, known := inv.GPUByUUID(g.UUID); known {
			continue
		}
		if !wasMIG[g.UUID] {
			klog.FromContext(ctx).Info("A GPU appeared that the plugin did not discover at start; it is offered after the plugin restarts", "gpu", g.UUID, "index", g.Index)
			continue
		}
		if g.ComputeModes, err = computeModesAt(p.cfg.SMSharingGPUs, g.Index); err != nil {
			return nil, nil, nil, err
		}
		one := &domain.Inventory{GPUs: []domain.GPU{g}, MPSVersion: inv.MPSVersion}
		if err := reserveForServer(one, p.cfg.MPS.ServerReserveMiB); err != nil {
			return nil, nil, nil, err
		}
		fromMIG = append(fromMIG, one.GPUs[0])
		gpus = append(gpus, one.GPUs[0])
	}
	slices.SortFunc(gpus, func(a, b domain.GPU) int { return a.Index - b.Index })
	return gpus, toMIG, fromMIG, nil
}

// migWatch is the state of the MIG layout reads: one at a time, and the
// lost devices already reported ("<claim UID>/<device>"), so each is
// reported once however many reads see it.
type migWatch struct {
	mu       sync.Mutex
	reported map[string]bool
}

// reportLost reports every prepared claim whose device left the node's
// layout, once: an error in the log, an Event on the claim and a counter,
// per lost device. A lost MIG instance is a MIGInstanceLost Event and
// gpufrac_mig_instances_lost_total; a whole GPU that stopped serving
// fractions (its MIG mode was turned on) is a FractionGPULost Event and
// gpufrac_fraction_gpus_lost_total.
func (p *Plugin) reportLost(ctx context.Context, lost []preparer.Lost) {
	logger := klog.FromContext(ctx)
	reported := map[string]bool{}
	for _, l := range lost {
		var migs, gpus int
		for _, d := range l.Devices {
			key := string(l.Claim.UID) + "/" + d.Device
			reported[key] = true
			if p.mig.reported[key] {
				continue
			}
			if d.MIG != nil {
				migs++
				logger.Error(nil, "A prepared claim's MIG instance is gone", "claim", klog.KRef(l.Claim.Namespace, l.Claim.Name),
					"claimUID", l.Claim.UID, "device", d.Device, "uuid", d.GPU.UUID, "profile", d.MIG.Profile)
				if p.events != nil {
					p.events.MIGInstanceLost(&l.Claim, d.Device, d.GPU.UUID, d.MIG.Profile)
				}
				continue
			}
			gpus++
			logger.Error(nil, "A prepared claim's GPU no longer serves fractions: its MIG mode was turned on", "claim", klog.KRef(l.Claim.Namespace, l.Claim.Name),
				"claimUID", l.Claim.UID, "device", d.Device, "uuid", d.GPU.UUID)
			if p.events != nil {
				p.events.FractionGPULost(&l.Claim, d.Device, d.GPU.UUID)
			}
		}
		p.metrics.ObserveMIGLost(migs)
		p.metrics.ObserveFractionGPULost(gpus)
	}
	// Claims unprepared since leave the set.
	p.mig.reported = reported
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
