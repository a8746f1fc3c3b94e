// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fractionmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The series that let dashboards and alerts join what the plugin knows
// with what containers use (docs/metrics.md, "Joining the metrics"): GPU
// health and MPS daemon readiness as series instead of only a slice taint
// or a Pod condition, and incident starts per prepared share with the
// claim's UID, the label the container series carry.

// joinDescs are the descriptors of the join series.
type joinDescs struct {
	gpuUnhealthy, mpsReady, shareIncidents *prometheus.Desc
}

func newJoinDescs() joinDescs {
	return joinDescs{
		gpuUnhealthy: prometheus.NewDesc("gpufrac_gpu_unhealthy",
			"1 while the plugin holds the GPU unhealthy and taints its devices in the ResourceSlice (reason: the taint's, e.g. \"XID 79\"), 0 with an empty reason while it is healthy.",
			[]string{"node", "gpu_uuid", "device", "reason"}, nil),
		mpsReady: prometheus.NewDesc("gpufrac_mps_daemon_ready",
			"1 when the MPS daemon of a GPU whose claims need one passed its health check (its Pod's readiness probe) when the plugin last saw it, 0 when it is missing, stopping or failing the check.",
			[]string{"node", "gpu_uuid"}, nil),
		shareIncidents: prometheus.NewDesc("gpufrac_fraction_incidents_total",
			"GPU memory incidents started per prepared share, by kind (those of gpufrac_incidents_total); the series go when the claim is unprepared.",
			[]string{"node", "namespace", "claim", "claim_uid", "gpu_uuid", "kind"}, nil),
	}
}

func (d joinDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.gpuUnhealthy, d.mpsReady, d.shareIncidents}
}

// shareKey is one prepared share as the incident series count it: a claim
// on a GPU (a claim with two shares of one GPU counts once there).
type shareKey struct {
	claimUID types.UID
	gpu      string
}

// shareIncidents counts incident starts per share and kind. Entries of
// claims no longer prepared are dropped at Unprepare and by the pruner
// (an MPS incident resolved during an Unprepare may land after it), and a
// scrape never shows them: the series are bounded by the prepared shares.
type shareIncidents struct {
	mu     sync.Mutex
	counts map[shareKey]map[incident.Kind]float64
}

// CountShareIncident implements incident.ShareCounter.
func (c *Collector) CountShareIncident(s incident.Share, kind incident.Kind) {
	if c == nil {
		return
	}
	c.incidents.mu.Lock()
	defer c.incidents.mu.Unlock()
	k := shareKey{s.ClaimUID, s.GPUUUID}
	if c.incidents.counts[k] == nil {
		c.incidents.counts[k] = map[incident.Kind]float64{}
	}
	c.incidents.counts[k][kind]++
}

// forget drops the counts of claims keep does not hold.
func (s *shareIncidents) forget(keep func(types.UID) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.counts {
		if !keep(k.claimUID) {
			delete(s.counts, k)
		}
	}
}

// collectShareIncidents writes every kind's count for every prepared,
// counted share, zero included: an alert's increase() then sees a claim's
// first incident instead of a series that appears at 1.
func (c *Collector) collectShareIncidents(ch chan<- prometheus.Metric, prepared []plan.Claim) {
	c.incidents.mu.Lock()
	defer c.incidents.mu.Unlock()
	for _, claim := range prepared {
		seen := map[string]bool{}
		for _, d := range claim.Devices {
			if !d.Counted() || seen[d.GPU.UUID] {
				continue
			}
			seen[d.GPU.UUID] = true
			counts := c.incidents.counts[shareKey{claim.UID, d.GPU.UUID}]
			for _, kind := range incident.Kinds {
				ch <- prometheus.MustNewConstMetric(c.joins.shareIncidents, prometheus.CounterValue, counts[kind],
					c.cfg.NodeName, claim.Namespace, claim.Name, string(claim.UID), d.GPU.UUID, string(kind))
			}
		}
	}
}

// collectHealth writes one series per GPU of the node (MIG-enabled GPUs
// included: their XIDs taint their instances).
func (c *Collector) collectHealth(ch chan<- prometheus.Metric) {
	if c.cfg.Unhealthy == nil {
		return
	}
	unhealthy := c.cfg.Unhealthy()
	seen := map[string]bool{}
	gpus := append([]domain.GPU(nil), c.cfg.Inventory.GPUs...)
	for _, m := range c.cfg.Inventory.MIGDevices {
		gpus = append(gpus, m.Parent)
	}
	for _, g := range gpus {
		if seen[g.UUID] {
			continue
		}
		seen[g.UUID] = true
		value := 0.0
		reason, bad := unhealthy[g.UUID]
		if bad {
			value = 1
		}
		ch <- prometheus.MustNewConstMetric(c.joins.gpuUnhealthy, prometheus.GaugeValue, value, c.cfg.NodeName, g.UUID, domain.DeviceName(g.Index), reason)
	}
}

// collectMPSReady writes one series per GPU whose daemon claims need.
func (c *Collector) collectMPSReady(ch chan<- prometheus.Metric) {
	if c.cfg.MPSReady == nil {
		return
	}
	for gpu, ready := range c.cfg.MPSReady() {
		value := 0.0
		if ready {
			value = 1
		}
		ch <- prometheus.MustNewConstMetric(c.joins.mpsReady, prometheus.GaugeValue, value, c.cfg.NodeName, gpu)
	}
}
