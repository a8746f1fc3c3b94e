// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/internal/node/filewrite"
	"github.com/gpufrac/gpufrac/internal/node/fractionmetrics"
	"github.com/gpufrac/gpufrac/internal/node/health"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/node/preparer"
	"github.com/gpufrac/gpufrac/internal/node/runtimeconfig"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Config is what the plugin needs from its command line.
type Config struct {
	NodeName   string
	KubeClient kubernetes.Interface
	// NVML is the library discovery runs against: the real one, or a
	// simulated server.
	NVML             nvml.Interface
	InventoryOptions nvmldiscovery.Options
	// PluginDataDir holds the DRA socket, the checkpoint and the MPS
	// directories.
	PluginDataDir string
	// RegistrarDir is the kubelet's plugin registry directory.
	RegistrarDir string
	// CDIRoot is where CDI specs for prepared claims are written.
	CDIRoot string
	// CDI holds the spec options: hook path and arguments, device nodes.
	CDI cdispec.Options
	// BootID invalidates the checkpoint after a reboot.
	BootID string
	// SMSharingGPUs reserves GPUs per compute mode (see
	// assignComputeModes); empty leaves every GPU open to both.
	SMSharingGPUs string
	// MPS configures the managed MPS servers. Without an image the node
	// refuses SMSharing claims, saying why.
	MPS MPSConfig
	// Health configures where GPU health comes from.
	Health HealthConfig
	// Metrics, when set, gets the per-fraction and driver metrics.
	Metrics prometheus.Registerer
	// HardLimitBand is how close to its hard limit a container counts as
	// at it (incident.Band); zero is incident.DefaultBand.
	HardLimitBand incident.Band
	// WriteCounter, when set, counts the checkpoint's and CDI specs' file
	// writes and fsyncs (benchmarks report them per claim).
	WriteCounter *filewrite.Counter
	// Failpoint is for crash tests only; see preparer.Config.
	Failpoint func(name string) error
	// StatusClearDelay holds back the write that clears an unprepared
	// claim's status (claimstatus.Writer.SetClearDelay); 0 writes at once.
	StatusClearDelay time.Duration
	// StatusBurstQuiet holds back a prepared claim's status write until
	// no Prepare came for this long, at most claimstatus.DefaultBurstMax
	// (claimstatus.Writer.SetBurst); 0 writes at once.
	StatusBurstQuiet time.Duration
	// SliceOrderInterval, when positive, publishes the node's GPUs
	// fullest first (best fit inside the node, order.go), republishing
	// when prepared claims change the order at most once per interval;
	// 0 keeps GPU index order.
	SliceOrderInterval time.Duration
	// OnFatal is called for background errors that retrying cannot fix,
	// such as slices the API server rejects; the caller should shut down.
	OnFatal func(error)
	// NVIDIARuntimeConfig is the host's NVIDIA container runtime
	// configuration (config.toml) as this process sees it; empty: not
	// read. Where it accepts NVIDIA_VISIBLE_DEVICES from unprivileged
	// containers the slices say so and the Node gets a Warning Event.
	NVIDIARuntimeConfig string
	// RollingUpdateUID is this instance's pod UID. When set, the instance
	// registers under its own socket names beside an old instance during a
	// DaemonSet rolling update (kubeletplugin.RollingUpdate) and takes over
	// the node's state once the old one exits (see InstanceLockFile).
	RollingUpdateUID types.UID
}

func (c *Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required (--node-name or NODE_NAME)"))
	}
	if c.KubeClient == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	if c.NVML == nil {
		errs = append(errs, errors.New("an NVML library is required"))
	}
	if c.PluginDataDir == "" || c.RegistrarDir == "" || c.CDIRoot == "" {
		errs = append(errs, errors.New("plugin data, registrar and CDI directories are required"))
	}
	if c.PluginDataDir != "" && !filepath.IsAbs(c.PluginDataDir) {
		// The CDI hook, run by the runtime from its own directory, records
		// containers under it (and refuses a relative --record-dir).
		errs = append(errs, fmt.Errorf("plugin data directory %q must be an absolute path", c.PluginDataDir))
	}
	if c.CDI.HookPath == "" || c.CDI.DeviceNode == nil {
		errs = append(errs, errors.New("the CDI hook path and a device node resolver are required"))
	}
	if c.BootID == "" {
		errs = append(errs, errors.New("the boot id is required"))
	}
	return errors.Join(errs...)
}

// HealthConfig says where GPU health comes from.
type HealthConfig struct {
	// SimulatedFile, when set, replaces NVML events: a JSON object of GPU
	// UUID to reason, re-read every second (see health.WatchFile).
	SimulatedFile string
	// IgnoredXIDs are application errors that do not make a GPU unhealthy.
	IgnoredXIDs []uint64
}

// dataDirMode is the plugin data directory's mode, set at every start.
const dataDirMode = 0o700

// makeDirs creates the plugin's directories. The data directory holds the
// DRA socket, the checkpoint and the MPS pipes: the plugin's (root's)
// alone, whatever mode it was found with (an existing directory keeps its
// mode through MkdirAll). Everything else reaches what it needs through
// bind mounts made by root.
func makeDirs(cfg Config) error {
	for _, dir := range []string{cfg.PluginDataDir, cfg.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating directory %s: %w", dir, err)
		}
	}
	if err := os.Chmod(cfg.PluginDataDir, dataDirMode); err != nil {
		return fmt.Errorf("setting the mode of the plugin data directory %s to %#o: %w", cfg.PluginDataDir, dataDirMode, err)
	}
	return nil
}

// CheckpointFile is the checkpoint's name under the plugin data directory.
const CheckpointFile = "checkpoint.json"

// Plugin is a running kubelet plugin.
type Plugin struct {
	cfg       Config
	inventory *domain.Inventory
	health    *health.Monitor
	preparer  *preparer.Preparer
	metrics   *fractionmetrics.Collector
	events    *eventReporter
	helper    *kubeletplugin.Helper
	status    *claimstatus.Writer
	cancel    context.CancelFunc
	done      sync.WaitGroup
	// ready is closed once this instance holds the instance lock and has
	// loaded the checkpoint; kubelet calls wait for it.
	ready chan struct{}
	lock  *os.File
	// calls counts kubelet calls in flight, so Stop releases the lock only
	// after the last checkpoint write of this instance.
	calls sync.WaitGroup
	// publishMu orders publishes; published is what the last one was
	// built from (order.go). orderPoke wakes the order loop.
	publishMu sync.Mutex
	published publishState
	orderPoke chan struct{}
	mig       migWatch
}

// Start discovers GPUs, recovers the checkpoint, starts the kubelet plugin
// servers (registration and DRA sockets) and publishes the node's
// ResourceSlices. It returns once the sockets listen; publishing and status
// writes continue in the background until Stop.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	logger := klog.FromContext(ctx)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configuring the kubelet plugin: %w", err)
	}
	inv, _, runtimeReport, err := describeNode(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := makeDirs(cfg); err != nil {
		return nil, err
	}
	bgCtx, cancel := context.WithCancel(ctx)
	p := &Plugin{cfg: cfg, inventory: inv, cancel: cancel, health: health.NewMonitor(), ready: make(chan struct{}), orderPoke: make(chan struct{}, 1)}
	started := false
	defer func() {
		if !started {
			p.Stop()
		}
	}()
	if cfg.RollingUpdateUID != "" {
		// Registered before the old instance is gone: the kubelet is never
		// without an instance of this driver, and calls wait (waitReady).
		if err := p.startHelper(ctx); err != nil {
			return nil, err
		}
	}
	if p.lock, err = lockInstance(ctx, cfg.PluginDataDir); err != nil {
		return nil, err
	}
	ckpt, err := checkpoint.Open(ctx, filepath.Join(cfg.PluginDataDir, CheckpointFile), cfg.BootID, checkpoint.WithCounter(cfg.WriteCounter))
	if err != nil {
		return nil, err
	}
	// The hook records each container here for per-fraction metrics.
	cfg.CDI.RecordDir = filepath.Join(cfg.PluginDataDir, "containers")
	cfg.CDI.Counter = cfg.WriteCounter
	cdi, err := cdispec.NewWriter(cfg.CDIRoot, cfg.CDI)
	if err != nil {
		return nil, err
	}

	p.startStatus(bgCtx, cfg, ckpt)
	p.reportRuntimeConfig(runtimeReport)
	if inv.EnforcementNote != "" {
		p.events.EnforcementReduced(cfg.NodeName, inv.Enforcement, inv.EnforcementNote)
	}
	mpsManager, err := p.newPreparer(ctx, bgCtx, cfg, ckpt, cdi)
	if err != nil {
		return nil, err
	}
	if err := p.startMetrics(bgCtx, cfg, ckpt, mpsManager); err != nil {
		return nil, err
	}
	if mpsManager != nil {
		p.runMPS(ctx, bgCtx, mpsManager)
	}

	if p.helper == nil {
		if err := p.startHelper(ctx); err != nil {
			return nil, err
		}
	}
	close(p.ready)
	// Published only by the instance that owns the node's state, so that
	// two instances never fight over the slices; in the fill order of the
	// claims recovered from the checkpoint.
	if _, err := p.publish(ctx, map[string]string{}); err != nil {
		return nil, fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	p.watchNode(bgCtx)
	started = true
	logger.Info("Kubelet plugin started", "node", cfg.NodeName, "gpus", len(inv.GPUs),
		"enforcement", inv.Enforcement, "prepared", len(p.preparer.Prepared()), "rollingUpdate", cfg.RollingUpdateUID != "",
		"pluginDataDir", cfg.PluginDataDir, "registrarDir", cfg.RegistrarDir, "cdiRoot", cfg.CDIRoot)
	return p, nil
}

// watchNode starts what republishes the slices after start: GPU health,
// the fill order of prepared claims and the MIG layout.
func (p *Plugin) watchNode(ctx context.Context) {
	p.watchHealth(ctx)
	if p.cfg.SliceOrderInterval > 0 {
		p.done.Go(func() { p.runOrder(ctx, p.cfg.SliceOrderInterval) })
	}
	p.watchMIGLayout(ctx)
}

func (p *Plugin) startHelper(ctx context.Context) error {
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(v1alpha1.DriverName),
		kubeletplugin.KubeClient(p.cfg.KubeClient),
		kubeletplugin.NodeName(p.cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(p.cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(p.cfg.RegistrarDir),
		// Claims of different pods prepare in parallel; the preparer
		// serialises calls for one claim itself, and the instance lock
		// keeps a second instance out (the helper's own cross-instance
		// lock would serialise every call).
		kubeletplugin.Serialize(false),
	}
	if p.cfg.RollingUpdateUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(p.cfg.RollingUpdateUID))
	}
	helper, err := kubeletplugin.Start(ctx, p, opts...)
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin helper: %w", err)
	}
	p.helper = helper
	return nil
}

// Inventory is what discovery found at start.
func (p *Plugin) Inventory() *domain.Inventory { return p.inventory }

// Stop closes the sockets and ends background work. Published slices stay:
// a restarted plugin takes them over, and removing them would make the
// scheduler forget the node's GPUs during an upgrade.
//
// The instance lock goes last, after the last call of this instance ended,
// so that a waiting new instance loads a checkpoint nobody writes any more.
func (p *Plugin) Stop() {
	if p.helper != nil {
		p.helper.Stop()
	}
	p.cancel()
	p.done.Wait()
	p.calls.Wait()
	if p.events != nil {
		p.events.shutdown()
	}
	if p.lock != nil {
		_ = p.lock.Close()
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: every claim is
// prepared concurrently and fails or succeeds on its own.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	p.calls.Add(1)
	defer p.calls.Done()
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	results := make([]kubeletplugin.PrepareResult, len(claims))
	var wg sync.WaitGroup
	for i, claim := range claims {
		wg.Go(func() {
			start := time.Now()
			// The helper just read the claim: its status write needs no GET.
			p.status.Seen(claim)
			devs, err := p.preparer.Prepare(ctx, claim)
			if err != nil {
				p.status.ForgetSeen(claim.Namespace, claim.Name, claim.UID)
			}
			p.metrics.ObservePrepare(time.Since(start), failureReason(err))
			results[i] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
		})
	}
	wg.Wait()
	p.claimsChanged()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for i, claim := range claims {
		out[claim.UID] = results[i]
	}
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.calls.Add(1)
	defer p.calls.Done()
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	results := make([]error, len(claims))
	var wg sync.WaitGroup
	for i, claim := range claims {
		wg.Go(func() {
			start := time.Now()
			results[i] = p.preparer.Unprepare(ctx, claim)
			p.metrics.ObserveUnprepare(time.Since(start), claim.UID, results[i])
			if results[i] != nil {
				p.events.UnprepareFailed(claim, results[i])
			}
		})
	}
	wg.Wait()
	p.claimsChanged()
	out := make(map[types.UID]error, len(claims))
	for i, claim := range claims {
		out[claim.UID] = results[i]
	}
	return out, nil
}

// failureReason labels a Prepare error for the errors metric.
func failureReason(err error) string {
	var invalid *plan.InvalidError
	var conflict *plan.ModeConflictError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &invalid):
		return fractionmetrics.ReasonInvalidClaim
	case errors.As(err, &conflict):
		return fractionmetrics.ReasonModeConflict
	case errors.Is(err, preparer.ErrNoMPS):
		return fractionmetrics.ReasonNoMPS
	default:
		return fractionmetrics.ReasonInternal
	}
}

// HandleError implements kubeletplugin.DRAPlugin: recoverable errors are
// retried by the helper; anything else (slices the API server refuses,
// dropped fields) will not fix itself, so the process should stop loudly.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	logger := klog.FromContext(ctx)
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		logger.Error(err, msg, "recoverable", true)
		return
	}
	logger.Error(err, msg, "recoverable", false)
	if p.cfg.OnFatal != nil {
		p.cfg.OnFatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// healthRefresh re-sends reports well within the kubelet's 30 s timeout.
const healthRefresh = 10 * time.Second

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of every
// GPU now, again on every change, and every healthRefresh.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if err := p.waitReady(ctx); err != nil {
		return nil
	}
	ticker := time.NewTicker(healthRefresh)
	defer ticker.Stop()
	for {
		changed := p.health.Changed()
		report := kubeletplugin.DeviceHealthReport{}
		now := time.Now()
		inv := p.preparer.Inventory()
		for _, gpu := range inv.GPUs {
			st := p.health.Get(gpu.UUID)
			h := kubeletplugin.DeviceHealth{PoolName: p.cfg.NodeName, DeviceName: domain.DeviceName(gpu.Index),
				Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: 3 * healthRefresh}
			if !st.Healthy {
				h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, st.Reason
			}
			report.Devices = append(report.Devices, h)
		}
		// A MIG instance is as healthy as its GPU: XIDs name the GPU.
		for _, m := range inv.MIGDevices {
			st := p.health.Get(m.Parent.UUID)
			h := kubeletplugin.DeviceHealth{PoolName: p.cfg.NodeName, DeviceName: m.Name(),
				Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: 3 * healthRefresh}
			if !st.Healthy {
				h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, st.Reason
			}
			report.Devices = append(report.Devices, h)
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}

// watchHealth starts the health source and republishes the slices, with
// unhealthy GPUs tainted, whenever health changes.
func (p *Plugin) watchHealth(ctx context.Context) {
	logger := klog.FromContext(ctx)
	uuids := make([]string, 0, len(p.inventory.GPUs))
	for _, g := range p.inventory.GPUs {
		uuids = append(uuids, g.UUID)
	}
	// A MIG-enabled GPU's XIDs taint its instances (resourceslices); one
	// without instances is watched too, for when its MIG mode changes.
	for _, m := range p.inventory.MIGDevices {
		if !slices.Contains(uuids, m.Parent.UUID) {
			uuids = append(uuids, m.Parent.UUID)
		}
	}
	for _, s := range p.inventory.Skipped {
		uuids = append(uuids, s.UUID)
	}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		if p.cfg.Health.SimulatedFile != "" {
			health.WatchFile(ctx, p.cfg.Health.SimulatedFile, uuids, time.Second, p.health)
			return
		}
		if err := health.WatchNVML(ctx, p.cfg.NVML, uuids, p.cfg.Health.IgnoredXIDs, p.health); err != nil {
			logger.Error(err, "GPU health is not watched")
		}
	}()
	go func() {
		defer p.done.Done()
		for {
			changed := p.health.Changed()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			if err := p.republish(ctx); err != nil {
				logger.Error(err, "Republishing ResourceSlices after a health change")
				continue
			}
			logger.Info("Republished ResourceSlices after a health change", "unhealthy", len(p.health.Unhealthy()))
		}
	}()
}

// describeNode discovers the node's GPUs, reads the NVIDIA runtime's
// configuration, applies the compute-mode reservation and builds the
// slices to publish.
func describeNode(ctx context.Context, cfg Config) (*domain.Inventory, resourceslice.DriverResources, runtimeconfig.Report, error) {
	inv, err := nvmldiscovery.Discover(ctx, cfg.NVML, cfg.InventoryOptions)
	if err != nil {
		return nil, resourceslice.DriverResources{}, runtimeconfig.Report{}, fmt.Errorf("discovering GPUs: %w", err)
	}
	runtimeReport := checkRuntimeConfig(ctx, cfg, inv)
	if err := assignComputeModes(inv, cfg.SMSharingGPUs); err != nil {
		return nil, resourceslice.DriverResources{}, runtimeReport, err
	}
	if inv.MPSVersion != domain.MPSVersionNone && (cfg.MPS.Image == "" || cfg.MPS.Namespace == "") {
		// MPS is off on the plugin: the slices and the plans say so (no
		// SMSharing; with per-cgroup limits no borrowing above the
		// request, since no daemon could evict the borrower).
		klog.FromContext(ctx).Info("MPS is off on this node: MPS turned off (no --mps-daemon-image: the chart's mps.enabled=false) or no --namespace; SMSharing is refused and, with per-cgroup limits, so is a memoryLimit above the request",
			"detectedMPSVersion", inv.MPSVersion)
		inv.MPSVersion = domain.MPSVersionNone
	}
	inv.MPSServerScope = mpsServerScope(ctx, cfg.MPS.ServerScope, inv.MPSVersion)
	if err := reserveForServer(inv, cfg.MPS.ServerReserveMiB); err != nil {
		return nil, resourceslice.DriverResources{}, runtimeReport, err
	}
	resources, err := resourceslices.DriverResources(cfg.NodeName, inv)
	if err != nil {
		return nil, resourceslice.DriverResources{}, runtimeReport, fmt.Errorf("building ResourceSlices: %w", err)
	}
	return inv, resources, runtimeReport, nil
}
