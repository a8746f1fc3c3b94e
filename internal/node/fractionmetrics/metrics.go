// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package fractionmetrics is the kubelet plugin's Prometheus view of what
// each fraction holds and uses: per share its guaranteed request and hard
// limit, per container its GPU memory in use (read from NVML for the
// container's cgroup, which gpufrac-cdi-hook records at creation, or summed
// over its processes) and its share of the SMs, per GPU
// its totals and over-commit ratio, and the driver's own health (Prepare
// latency, errors by reason, prepared claims, MPS daemons). Everything is
// computed at scrape time from the checkpoint's plans and the hook's
// records, so collection never takes a lock Prepare holds for long, and a
// container that is gone is dropped from the records instead of leaving a
// stale series.
package fractionmetrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Config feeds the collector.
type Config struct {
	NodeName  string
	Inventory *domain.Inventory
	// Current, when set, returns the inventory as it is now (a GPU's MIG
	// mode may change while the plugin runs); Inventory otherwise.
	Current func() *domain.Inventory
	// Prepared returns the prepared claims (the checkpoint's plans).
	Prepared func() []plan.Claim
	// RecordDir is where gpufrac-cdi-hook records containers.
	RecordDir string
	// NVML, initialised, reads per-cgroup usage; nil skips usage.
	NVML nvml.Interface
	// ProcRoot and CgroupRoot map NVML's host PIDs to container cgroups
	// (defaults: /proc, and the hook's cgroup root). The plugin needs the
	// host PID namespace for this.
	ProcRoot, CgroupRoot string
	// MPSDaemons returns the number of claims per GPU daemon; optional.
	MPSDaemons func() map[string]int
	// Quarantined returns how many checkpoint entries this plugin version
	// could not understand; optional.
	Quarantined func() int
	// Unhealthy returns the GPUs the plugin holds unhealthy (and taints),
	// by UUID, with the reason; optional.
	Unhealthy func() map[string]string
	// MPSReady returns, per GPU whose MPS daemon claims need, whether it
	// passed its health check when last seen; optional.
	MPSReady func() map[string]bool
}

// The reasons of gpufrac_prepare_errors_total (the plugin classifies each
// failed Prepare as one).
const (
	ReasonInvalidClaim = "invalid_claim"
	ReasonModeConflict = "mode_conflict"
	ReasonNoMPS        = "no_mps"
	ReasonInternal     = "internal"
)

// Collector implements prometheus.Collector for the fraction metrics and
// holds the driver's latency histograms and error counters.
type Collector struct {
	cfg Config

	prepareSeconds   *prometheus.HistogramVec
	unprepareSeconds prometheus.Histogram
	errorsTotal      *prometheus.CounterVec
	reordersTotal    prometheus.Counter
	migLost          prometheus.Counter
	fractionGPULost  prometheus.Counter

	shareRequest, shareLimit, containerUsed, containerSM *prometheus.Desc
	gpuTotal, gpuGuaranteed, gpuLimitSum, gpuOvercommit  *prometheus.Desc
	claimsPrepared, mpsDaemons, mpsDaemonClaims          *prometheus.Desc
	quarantined                                          *prometheus.Desc
	joins                                                joinDescs

	incidents shareIncidents
}

// New builds the collector; register it with a registry.
func New(cfg Config) *Collector {
	// claim_uid joins a share to its containers' usage series.
	share := []string{"node", "namespace", "claim", "claim_uid", "gpu_uuid", "device", "share", "compute_mode", "enforcement"}
	gpu := []string{"node", "gpu_uuid", "device"}
	container := []string{"node", "namespace", "pod", "container", "claim_uid", "gpu_uuid"}
	c := &Collector{
		cfg: cfg, joins: newJoinDescs(), incidents: shareIncidents{counts: map[shareKey]map[incident.Kind]float64{}},
		prepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpufrac_prepare_duration_seconds", Help: "Time to prepare one claim.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"result"}),
		unprepareSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gpufrac_unprepare_duration_seconds", Help: "Time to unprepare one claim.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		migLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufrac_mig_instances_lost_total",
			Help: "Prepared claims' MIG instances found gone from the node's MIG layout (each claim's instance counted once when noticed)."}),
		fractionGPULost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufrac_fraction_gpus_lost_total",
			Help: "Prepared claims' shares of a whole GPU whose MIG mode was turned on while the plugin ran, so that it no longer serves fractions (each claim's GPU counted once when noticed)."}),
		errorsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufrac_prepare_errors_total", Help: "Failed Prepare calls by reason."}, []string{"reason"}),
		reordersTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufrac_resourceslice_reorders_total",
			Help: "ResourceSlice updates that reorder the node's GPUs fullest first after prepared claims changed (best fit inside the node; at most one per --slice-order-interval)."}),
		shareRequest: prometheus.NewDesc("gpufrac_fraction_memory_request_bytes", "Guaranteed GPU memory of a prepared share (its soft limit).", share, nil),
		shareLimit:   prometheus.NewDesc("gpufrac_fraction_memory_limit_bytes", "Hard GPU memory limit of a prepared share.", share, nil),
		containerUsed: prometheus.NewDesc("gpufrac_container_gpu_memory_used_bytes",
			"GPU memory a container uses now: NVML's per-cgroup accounting where the node enforces dmem, else the sum over its processes.", container, nil),
		containerSM: prometheus.NewDesc("gpufrac_container_sm_utilization_percent",
			"Percent of the GPU's SMs a container's processes kept busy in NVML's latest per-process samples.", container, nil),
		gpuTotal:       prometheus.NewDesc("gpufrac_gpu_memory_total_bytes", "GPU memory offered to claims.", gpu, nil),
		gpuGuaranteed:  prometheus.NewDesc("gpufrac_gpu_memory_guaranteed_bytes", "Sum of the guaranteed requests of the GPU's prepared shares.", gpu, nil),
		gpuLimitSum:    prometheus.NewDesc("gpufrac_gpu_memory_limit_sum_bytes", "Sum of the hard limits of the GPU's prepared shares.", gpu, nil),
		gpuOvercommit:  prometheus.NewDesc("gpufrac_gpu_memory_overcommit_ratio", "Sum of hard limits over GPU memory; above 1 the limits are burstable, never the requests.", gpu, nil),
		claimsPrepared: prometheus.NewDesc("gpufrac_claims_prepared", "Claims prepared on this node.", []string{"node"}, nil),
		mpsDaemons:     prometheus.NewDesc("gpufrac_mps_daemons", "MPS control daemons the plugin runs.", []string{"node"}, nil),
		quarantined: prometheus.NewDesc("gpufrac_checkpoint_quarantined_entries",
			"Checkpoint entries this plugin version does not understand (written by a later one): kept, and nothing they may own is removed (docs/operations.md).", []string{"node"}, nil),
		mpsDaemonClaims: prometheus.NewDesc("gpufrac_mps_daemon_claims",
			"Claims counted as users of a GPU's MPS daemon (SMSharing claims; on MPS v3 nodes with per-cgroup limits every claim, TimeSlicing included, is an MPS client); the daemon stops when this reaches 0.", []string{"node", "gpu_uuid"}, nil),
	}
	c.startErrorsAtZero()
	return c
}

// startErrorsAtZero writes every reason's series from the start: an alert's
// increase() then sees the node's first failed Prepare, which it would miss
// on a series that appears at 1.
func (c *Collector) startErrorsAtZero() {
	for _, r := range []string{ReasonInvalidClaim, ReasonModeConflict, ReasonNoMPS, ReasonInternal} {
		c.errorsTotal.WithLabelValues(r)
	}
}

// ObservePrepare records one Prepare; reason classifies a failure.
func (c *Collector) ObservePrepare(d time.Duration, reason string) {
	result := "success"
	if reason != "" {
		result = "error"
		c.errorsTotal.WithLabelValues(reason).Inc()
	}
	c.prepareSeconds.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveUnprepare records one Unprepare of the claim uid; err nil means
// the claim is gone from the node, and so are its incident counts.
func (c *Collector) ObserveUnprepare(d time.Duration, uid types.UID, err error) {
	c.unprepareSeconds.Observe(d.Seconds())
	if err == nil {
		c.incidents.forget(func(u types.UID) bool { return u != uid })
	}
}

// ObserveSliceReorder counts one republish in fill order.
func (c *Collector) ObserveSliceReorder() {
	if c != nil {
		c.reordersTotal.Inc()
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.prepareSeconds.Describe(ch)
	c.unprepareSeconds.Describe(ch)
	c.errorsTotal.Describe(ch)
	c.reordersTotal.Describe(ch)
	c.migLost.Describe(ch)
	c.fractionGPULost.Describe(ch)
	for _, d := range []*prometheus.Desc{c.shareRequest, c.shareLimit, c.containerUsed, c.containerSM, c.gpuTotal, c.gpuGuaranteed, c.gpuLimitSum, c.gpuOvercommit, c.claimsPrepared, c.mpsDaemons, c.mpsDaemonClaims, c.quarantined} {
		ch <- d
	}
	for _, d := range c.joins.all() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.prepareSeconds.Collect(ch)
	c.unprepareSeconds.Collect(ch)
	c.errorsTotal.Collect(ch)
	c.reordersTotal.Collect(ch)
	c.migLost.Collect(ch)
	c.fractionGPULost.Collect(ch)
	node := c.cfg.NodeName
	prepared := c.cfg.Prepared()
	guaranteed, limits := map[string]float64{}, map[string]float64{}
	live := map[types.UID]bool{}
	for _, claim := range prepared {
		live[claim.UID] = true
		for _, d := range claim.Devices {
			if !d.Counted() {
				continue // adminAccess: no share of the GPU's accounting
			}
			share := ""
			if d.ShareID != nil {
				share = string(*d.ShareID)
			}
			labels := []string{node, claim.Namespace, claim.Name, string(claim.UID), d.GPU.UUID, d.Device, share, string(d.ComputeMode), string(d.Enforcement)}
			ch <- prometheus.MustNewConstMetric(c.shareRequest, prometheus.GaugeValue, float64(d.SoftLimitBytes), labels...)
			ch <- prometheus.MustNewConstMetric(c.shareLimit, prometheus.GaugeValue, float64(d.HardLimitBytes), labels...)
			guaranteed[d.GPU.UUID] += float64(d.SoftLimitBytes)
			limits[d.GPU.UUID] += float64(d.HardLimitBytes)
		}
	}
	inv := c.cfg.Inventory
	if c.cfg.Current != nil {
		inv = c.cfg.Current()
	}
	for _, g := range inv.GPUs {
		labels := []string{node, g.UUID, domain.DeviceName(g.Index)}
		total := float64(g.MemoryBytes)
		ch <- prometheus.MustNewConstMetric(c.gpuTotal, prometheus.GaugeValue, total, labels...)
		ch <- prometheus.MustNewConstMetric(c.gpuGuaranteed, prometheus.GaugeValue, guaranteed[g.UUID], labels...)
		ch <- prometheus.MustNewConstMetric(c.gpuLimitSum, prometheus.GaugeValue, limits[g.UUID], labels...)
		ch <- prometheus.MustNewConstMetric(c.gpuOvercommit, prometheus.GaugeValue, limits[g.UUID]/total, labels...)
	}
	ch <- prometheus.MustNewConstMetric(c.claimsPrepared, prometheus.GaugeValue, float64(len(prepared)), node)
	if c.cfg.Quarantined != nil {
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, float64(c.cfg.Quarantined()), node)
	}
	if c.cfg.MPSDaemons != nil {
		users := c.cfg.MPSDaemons()
		ch <- prometheus.MustNewConstMetric(c.mpsDaemons, prometheus.GaugeValue, float64(len(users)), node)
		for gpu, n := range users {
			ch <- prometheus.MustNewConstMetric(c.mpsDaemonClaims, prometheus.GaugeValue, float64(n), node, gpu)
		}
	}
	c.collectHealth(ch)
	c.collectMPSReady(ch)
	c.collectShareIncidents(ch, prepared)
	c.collectUsage(ch, live)
}

// collectUsage reads the hook's records: one series per container and GPU
// whose cgroup still exists, for claims still prepared. It changes
// nothing (a scrape must not have side effects): PruneRecords removes the
// records of containers or claims that are gone. NVML's process list is
// read once per GPU and scrape.
func (c *Collector) collectUsage(ch chan<- prometheus.Metric, live map[types.UID]bool) {
	if c.cfg.RecordDir == "" {
		return
	}
	claims, err := os.ReadDir(c.cfg.RecordDir)
	if err != nil {
		return
	}
	perGPU := map[string]*gpuProcesses{}
	now := time.Now()
	for _, claimDir := range claims {
		if !live[types.UID(claimDir.Name())] {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(c.cfg.RecordDir, claimDir.Name(), "*.json"))
		for _, f := range files {
			r, ok := readRecord(f)
			if !ok {
				continue
			}
			if _, err := os.Stat(r.Cgroup); errors.Is(err, os.ErrNotExist) {
				continue
			}
			c.containerUsage(ch, r, perGPU, now)
		}
	}
}

func readRecord(path string) (record.Record, bool) {
	r, err := record.Read(path)
	return r, err == nil
}

// PruneRecords removes the records of claims no longer prepared and of
// containers whose cgroup is gone, so their series end and the directory
// does not grow, and the incident counts of claims no longer prepared. It
// returns how many records it removed.
func (c *Collector) PruneRecords() (int, error) {
	live := map[types.UID]bool{}
	for _, claim := range c.cfg.Prepared() {
		live[claim.UID] = true
	}
	c.incidents.forget(func(uid types.UID) bool { return live[uid] })
	if c.cfg.RecordDir == "" {
		return 0, nil
	}
	claims, err := os.ReadDir(c.cfg.RecordDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading container records: %w", err)
	}
	removed := 0
	var errs []error
	for _, claimDir := range claims {
		dir := filepath.Join(c.cfg.RecordDir, claimDir.Name())
		if !live[types.UID(claimDir.Name())] {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, f := range files {
			r, ok := readRecord(f)
			if !ok {
				continue
			}
			if _, err := os.Stat(r.Cgroup); errors.Is(err, os.ErrNotExist) {
				if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
					continue
				}
				removed++
			}
		}
	}
	return removed, errors.Join(errs...)
}

// RunPruner calls PruneRecords every interval until ctx ends.
func (c *Collector) RunPruner(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if _, err := c.PruneRecords(); err != nil {
			klog.FromContext(ctx).Error(err, "Pruning container records")
		}
	}, interval)
}

func (c *Collector) containerUsage(ch chan<- prometheus.Metric, r record.Record, perGPU map[string]*gpuProcesses, now time.Time) {
	if c.cfg.NVML == nil {
		return
	}
	for _, uuid := range r.GPUs {
		dev, ret := c.cfg.NVML.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			continue
		}
		procs := perGPU[uuid]
		if procs == nil {
			procs = c.readProcesses(dev, now)
			perGPU[uuid] = procs
		}
		labels := []string{c.cfg.NodeName, r.Namespace, r.Pod, r.Container, r.ClaimUID, uuid}
		usage := procs.forContainer(r.Cgroup)
		if lim, ret := dev.GetMemoryLimits_v1(r.Cgroup); ret == nvml.SUCCESS {
			ch <- prometheus.MustNewConstMetric(c.containerUsed, prometheus.GaugeValue, float64(lim.CurrentUsed), labels...)
		} else if usage.memoryKnown {
			ch <- prometheus.MustNewConstMetric(c.containerUsed, prometheus.GaugeValue, float64(usage.memoryBytes), labels...)
		}
		if usage.smKnown {
			ch <- prometheus.MustNewConstMetric(c.containerSM, prometheus.GaugeValue, float64(usage.smPercent), labels...)
		}
	}
}

// ObserveMIGLost counts n prepared shares whose MIG instance is gone.
func (c *Collector) ObserveMIGLost(n int) {
	if c != nil {
		c.migLost.Add(float64(n))
	}
}

// ObserveFractionGPULost counts n prepared shares whose GPU stopped
// serving fractions (its MIG mode was turned on).
func (c *Collector) ObserveFractionGPULost(n int) {
	if c != nil {
		c.fractionGPULost.Add(float64(n))
	}
}
