// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
)

// fragmentationCollector reports, at each scrape, per GPU pool (every
// gpu-type device of one productName) the GPUs holding shares, the lower
// bound of those shares and the GPUs that would free up if their shares
// moved (internal/core/fragmentation, as `kubectl gpufrac status` says
// it). It reads the informer caches the admission webhook keeps of slices
// and claims, so it adds no watch; a scrape at 1,000 nodes of 8 GPUs costs
// about 35 ms (BenchmarkAnalyze1000Nodes).
type fragmentationCollector struct {
	slices                    resourcelisters.ResourceSliceLister
	claims                    resourcelisters.ResourceClaimLister
	inUse, lowerBound, freeMe *prometheus.Desc
}

// RegisterClusterMetrics registers, where metrics can be registered, the
// series the controller computes from its caches of the cluster:
// gpufrac_fragmentation_gpus_* and gpufrac_resourceslice_ignored_sizes
// (whose devices also get Events through client until ctx ends). cluster
// is the admission cache built on factory, started and synced. Run calls it;
// test/promscenario calls it to expose the controller's real series.
func RegisterClusterMetrics(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory, cluster *admission.InformerCluster, metrics prometheus.Gatherer) {
	watchSliceSizes(ctx, client, cluster, metrics)
	registerFragmentation(factory, metrics)
}

// registerFragmentation registers the collector where metrics can be
// registered. The informers of factory it reads are the admission cache's
// (admission.NewInformerCluster), started and synced already.
func registerFragmentation(factory informers.SharedInformerFactory, metrics prometheus.Gatherer) {
	if reg, ok := metrics.(prometheus.Registerer); ok {
		reg.MustRegister(newFragmentationCollector(factory))
	}
}

// newFragmentationCollector reads slices and claims from factory's listers.
func newFragmentationCollector(factory informers.SharedInformerFactory) *fragmentationCollector {
	pool := []string{"pool"}
	return &fragmentationCollector{
		slices: factory.Resource().V1().ResourceSlices().Lister(),
		claims: factory.Resource().V1().ResourceClaims().Lister(),
		inUse:  prometheus.NewDesc("gpufrac_fragmentation_gpus_in_use", "GPUs of the pool that hold at least one allocated share.", pool, nil),
		lowerBound: prometheus.NewDesc("gpufrac_fragmentation_gpus_lower_bound",
			"The fewest GPUs the pool's allocated shares could occupy: their guaranteed memory over the pool's GPU memory, rounded up.", pool, nil),
		freeMe: prometheus.NewDesc("gpufrac_fragmentation_gpus_freeable",
			"GPUs of the pool whose shares would all fit into free memory of its other GPUs in use (greedy, smallest first): what moving shares could free; a report, nothing is evicted.", pool, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *fragmentationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inUse
	ch <- c.lowerBound
	ch <- c.freeMe
}

// Collect implements prometheus.Collector.
func (c *fragmentationCollector) Collect(ch chan<- prometheus.Metric) {
	slices, err := c.slices.List(labels.Everything())
	if err != nil {
		return
	}
	claims, err := c.claims.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range fragmentation.Analyze(fragmentation.Collect(slices, claims)) {
		ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(p.InUse), p.Name)
		ch <- prometheus.MustNewConstMetric(c.lowerBound, prometheus.GaugeValue, float64(p.LowerBound), p.Name)
		ch <- prometheus.MustNewConstMetric(c.freeMe, prometheus.GaugeValue, float64(p.Freeable), p.Name)
	}
}
