// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/admission"
)

// sliceSizeReporter tells an operator, on the slice itself, that a node's
// GPU size is ignored cluster-wide (admission.ConsistentGPUSizes): an
// Event on the ResourceSlice, a log line, and the
// gpufrac_resourceslice_ignored_sizes gauge.
type sliceSizeReporter struct {
	logger   klog.Logger
	recorder events.EventRecorder
}

// watchSliceSizes reports ignored sizes of cluster's slices with Events
// sent until ctx ends, and registers the gauge where metrics can be
// registered (the controller's registry is one).
func watchSliceSizes(ctx context.Context, client kubernetes.Interface, cluster *admission.InformerCluster, metrics prometheus.Gatherer) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()
	cluster.SetSizeReporter(&sliceSizeReporter{logger: klog.FromContext(ctx), recorder: b.NewRecorder(scheme.Scheme, "gpufrac-controller")})
	if reg, ok := metrics.(prometheus.Registerer); ok {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpufrac_resourceslice_ignored_sizes",
			Help: "gpufrac devices whose published memory differs from what the other slices of their GPU model agree on, and which admission and KAI translation therefore ignore",
		}, func() float64 { return float64(cluster.IgnoredSizes()) }))
	}
	// Reported now, not only at the first admission request.
	cluster.IgnoredSizes()
}

func (r *sliceSizeReporter) IgnoredSize(i admission.IgnoredSize) {
	r.logger.Error(nil, "A ResourceSlice's GPU memory differs from what the other slices of its model publish; ignored for admission and translation",
		"resourceSlice", i.Slice.Name, "device", i.Device, "productName", i.Product, "memoryTotal", i.Size.String(), "agreed", i.Agreed.String())
	r.recorder.Eventf(i.Slice, nil, v1.EventTypeWarning, "GPUMemoryIgnored", "Admission",
		"device %s publishes a GPU of %s total memory (memoryTotalMiB, or its capacity plus mpsServerReserveMiB, to the 256Mi step; or a capacity above that total), but the other slices of %q agree on %s: ignored for admission and KAI translation (one node cannot change the GPU sizes of the cluster)",
		i.Device, i.Size.String(), i.Product, i.Agreed.String())
}
