package nodeplugin

import (
	"context"
	"errors"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/pkg/incident"
)

// incidentInterval is how often containers' GPU memory is checked for
// incidents: often enough that a person reading Events sees borrowing
// while it happens, rarely enough to cost nothing (one NVML call per
// container and GPU).
const incidentInterval = 5 * time.Second

// watchIncidents samples every recorded container's GPU memory and makes
// borrowing and hard-limit incidents visible (Events on claim and pod, a
// status.devices condition, gpufrac_incidents_total). lib must be
// initialised (nil: nothing to sample).
func (p *Plugin) watchIncidents(ctx context.Context, lib nvml.Interface, recordDir string) {
	if lib == nil || recordDir == "" {
		return
	}
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
	source := incident.NVMLSource{NVML: lib, RecordDir: recordDir, Prepared: p.preparer.Prepared}
	emitter := &incident.Emitter{Recorder: p.events.recorder, Conditions: p.events.status, Counter: counter}
	detector := incident.NewDetector()
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
