// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/node/incident"
)

// incidentInterval is how often containers' GPU memory is checked for
// incidents: often enough that a person reading Events sees borrowing
// while it happens, rarely enough to cost nothing (one NVML call per
// container and GPU).
const incidentInterval = 5 * time.Second

// watchIncidents samples every recorded container's GPU memory and makes
// borrowing and hard-limit incidents visible (Events on claim and pod, a
// status.devices condition, gpufrac_incidents_total). lib must be
// initialised (nil: nothing to sample). mpsManager, when it reports the
// clients its servers terminate (incident.MPSEventSource), adds MPS
// evictions and terminations.
func (p *Plugin) watchIncidents(ctx context.Context, lib nvml.Interface, recordDir string, mpsManager any) {
	counter := incident.NewCounter()
	if p.cfg.Metrics != nil {
		if err := p.cfg.Metrics.Register(counter); err != nil {
			// A second instance in one process (a rolling update in
			// tests) counts on the first one's series.
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				counter = already.ExistingCollector.(*prometheus.CounterVec)
			} else {
				klog.FromContext(ctx).Error(err, "Registering the incident counter; incidents are still reported as Events")
			}
		}
	}
	gpus := p.preparer.Inventory().GPUs
	uuids := make([]string, 0, len(gpus))
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	incident.StartAtZero(counter, p.cfg.NodeName, uuids)
	emitter := &incident.Emitter{Recorder: p.events.recorder, Conditions: p.events.status, Counter: counter, Shares: p.metrics}
	if src, ok := mpsManager.(incident.MPSEventSource); ok {
		// The manager reports while it reads a daemon's log, which it also
		// does inside a claim's Unprepare (so that the victim's claim is
		// still known): the claim is resolved there, and the API writes are
		// left to a goroutine so that Unprepare does not wait on them. The
		// buffer holds far more than one GPU's clients; a report beyond it
		// is logged and dropped rather than block the manager.
		queue := make(chan incident.Incident, 1024)
		containerOf := incident.RecordsContainerOf(recordDir, "/proc", p.cfg.InventoryOptions.CgroupRoot)
		src.WatchTerminations(func(ev incident.MPSEvent) {
			inc, ok := incident.FromMPS(p.cfg.NodeName, ev, p.preparer.Prepared(), containerOf)
			if !ok {
				return
			}
			select {
			case queue <- inc:
			default:
				klog.FromContext(ctx).Error(nil, "Dropping an MPS incident: too many at once", "kind", inc.Kind, "claimUID", inc.Share.ClaimUID, "gpu", inc.Share.GPUUUID)
			}
		})
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case inc := <-queue:
					emitter.Emit(ctx, inc)
				}
			}
		}()
	}
	if lib == nil || recordDir == "" {
		return
	}
	source := incident.NVMLSource{NVML: lib, RecordDir: recordDir, Prepared: p.preparer.Prepared}
	detector := incident.NewDetectorWithBand(p.cfg.HardLimitBand)
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			for _, inc := range detector.Observe(p.cfg.NodeName, source.Samples(time.Now())) {
				emitter.Emit(ctx, inc)
			}
		}, incidentInterval)
	}()
}
