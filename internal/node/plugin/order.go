// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// Best fit inside the node. kube-scheduler's allocator takes, on the node
// it scores best, the first device in slice order that fits (pools and
// slices by name, devices in slice order; the kubeletplugin helper's
// resourceslice.Pool documents "within a slice the preferred devices
// should be listed first"). The plugin therefore publishes its GPUs
// fullest first (resourceslices.OrderByFill over the guaranteed memory of
// its prepared claims), which turns that first fit into a best fit. Names
// and content never change: allocations, checkpoints and status entries
// name devices, and a reorder is one Update of the node's slice.
//
// The plugin sees prepared claims, not the scheduler's allocations in
// flight: a claim counts from the kubelet's NodePrepareResources (after
// the bind and the pod's sync) until its NodeUnprepareResources, and a
// change is republished at most once per Config.SliceOrderInterval. Pods
// the scheduler places on the node meanwhile see the older order; each
// still gets a GPU that fits (the scheduler counts its own allocations),
// only not necessarily the fullest.

// DefaultSliceOrderInterval bounds the reorder Updates to one per second
// per node: at 1,000 nodes at most 1,000 writes a second, and only nodes
// whose prepared claims changed the order write at all (docs/metrics.md
// has the measured cost).
const DefaultSliceOrderInterval = time.Second

// publishState is what the published slices were built from.
type publishState struct {
	unhealthy map[string]string
	// order is the device names of the last publish, in order.
	order []string
}

// usedByDevice is the guaranteed memory of the prepared claims per device
// of this node's pool.
func (p *Plugin) usedByDevice() map[string]int64 {
	used := map[string]int64{}
	if p.preparer == nil {
		return used
	}
	for _, c := range p.preparer.Prepared() {
		for _, d := range c.Devices {
			if d.Pool == p.cfg.NodeName {
				used[d.Device] += d.SoftLimitBytes
			}
		}
	}
	return used
}

// buildResources is what the node publishes for unhealthy (UUID to
// reason) and, with ordering on, its prepared claims.
func (p *Plugin) buildResources(unhealthy map[string]string) (resourceslice.DriverResources, error) {
	res, err := resourceslices.DriverResourcesWithHealth(p.cfg.NodeName, p.preparer.Inventory(), unhealthy)
	if err != nil || p.cfg.SliceOrderInterval <= 0 {
		return res, err
	}
	return resourceslices.OrderResources(res, p.usedByDevice()), nil
}

// publish builds and publishes the node's slices; unhealthy nil keeps the
// health of the last publish. It reports whether the device order changed.
func (p *Plugin) publish(ctx context.Context, unhealthy map[string]string) (bool, error) {
	p.publishMu.Lock()
	defer p.publishMu.Unlock()
	if unhealthy == nil {
		unhealthy = p.published.unhealthy
	}
	res, err := p.buildResources(unhealthy)
	if err != nil {
		return false, err
	}
	order := deviceOrder(res)
	if err := p.helper.PublishResources(ctx, res); err != nil {
		return false, err
	}
	changed := !slices.Equal(order, p.published.order)
	p.published = publishState{unhealthy: unhealthy, order: order}
	return changed, nil
}

// orderChanged tells whether the prepared claims now ask for another
// device order than the one published.
func (p *Plugin) orderChanged() (bool, error) {
	p.publishMu.Lock()
	defer p.publishMu.Unlock()
	res, err := p.buildResources(p.published.unhealthy)
	if err != nil {
		return false, err
	}
	return !slices.Equal(deviceOrder(res), p.published.order), nil
}

func deviceOrder(res resourceslice.DriverResources) []string {
	var out []string
	for _, pool := range res.Pools {
		for _, s := range pool.Slices {
			for _, d := range s.Devices {
				out = append(out, d.Name)
			}
		}
	}
	return out
}

// claimsChanged tells the order loop that prepared claims changed; it
// never blocks a kubelet call.
func (p *Plugin) claimsChanged() {
	select {
	case p.orderPoke <- struct{}{}:
	default:
	}
}

// runOrder republishes when the prepared claims change the device order,
// at most once per interval: changes within the interval coalesce into one
// Update built from the claims prepared when it is sent.
func (p *Plugin) runOrder(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.orderPoke:
		}
		if wait := interval - time.Since(last); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		select { // pokes of the wait are covered by this pass
		case <-p.orderPoke:
		default:
		}
		changed, err := p.orderChanged()
		if err == nil && changed {
			_, err = p.publish(ctx, nil)
			last = time.Now()
			p.metrics.ObserveSliceReorder()
		}
		if err != nil {
			logger.Error(err, "Republishing ResourceSlices in fill order")
		}
	}
}
