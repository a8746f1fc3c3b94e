package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/pkg/inventory"
	"github.com/gpufrac/gpufrac/pkg/resourceslices"
)

// Config is what the plugin needs from its command line.
type Config struct {
	NodeName   string
	KubeClient kubernetes.Interface
	// NVML is the library discovery runs against: the real one, or a
	// simulated server.
	NVML             nvml.Interface
	InventoryOptions inventory.Options
	// PluginDataDir holds the DRA socket (and, later, the checkpoint).
	PluginDataDir string
	// RegistrarDir is the kubelet's plugin registry directory.
	RegistrarDir string
	// CDIRoot is where CDI specs for prepared claims are written.
	CDIRoot string
	// OnFatal is called for background errors that retrying cannot fix,
	// such as slices the API server rejects; the caller should shut down.
	OnFatal func(error)
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
	if c.PluginDataDir == "" || c.RegistrarDir == "" {
		errs = append(errs, errors.New("plugin data and registrar directories are required"))
	}
	return errors.Join(errs...)
}

// Plugin is a running kubelet plugin.
type Plugin struct {
	cfg       Config
	inventory *inventory.Inventory
	helper    *kubeletplugin.Helper
}

// Start discovers GPUs, starts the kubelet plugin servers (registration and
// DRA sockets) and publishes the node's ResourceSlices. It returns once the
// sockets listen; publishing continues in the background.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	logger := klog.FromContext(ctx)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configuring the kubelet plugin: %w", err)
	}
	inv, err := inventory.Discover(ctx, cfg.NVML, cfg.InventoryOptions)
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	resources, err := resourceslices.DriverResources(cfg.NodeName, inv)
	if err != nil {
		return nil, fmt.Errorf("building ResourceSlices: %w", err)
	}
	for _, dir := range []string{cfg.PluginDataDir, cfg.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating directory %s: %w", dir, err)
		}
	}

	p := &Plugin{cfg: cfg, inventory: inv}
	helper, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(v1alpha1.DriverName),
		kubeletplugin.KubeClient(cfg.KubeClient),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the kubelet plugin helper: %w", err)
	}
	p.helper = helper
	if err := helper.PublishResources(ctx, resources); err != nil {
		helper.Stop()
		return nil, fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	logger.Info("Kubelet plugin started", "node", cfg.NodeName, "gpus", len(inv.GPUs),
		"enforcement", inv.Enforcement, "pluginDataDir", cfg.PluginDataDir, "registrarDir", cfg.RegistrarDir)
	return p, nil
}

// Inventory is what discovery found at start.
func (p *Plugin) Inventory() *inventory.Inventory { return p.inventory }

// Stop closes the sockets. Published slices stay: a restarted plugin takes
// them over, and removing them would make the scheduler forget the node's
// GPUs during an upgrade.
func (p *Plugin) Stop() {
	p.helper.Stop()
}

// ErrPrepareUnsupported is the per-claim error until claim preparation lands:
// the kubelet retries and the pod stays in ContainerCreating with this reason
// instead of starting without its limits.
var ErrPrepareUnsupported = errors.New("gpufrac: this plugin version cannot prepare claims yet; the pod waits until a version that can is rolled out")

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		result[claim.UID] = kubeletplugin.PrepareResult{
			Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, ErrPrepareUnsupported),
		}
	}
	return result, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Nothing is
// ever prepared by this version, and unpreparing an unknown claim is a
// success by the kubelet's contract.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		result[claim.UID] = nil
	}
	return result, nil
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

// WatchHealthStatus implements kubeletplugin.DRAPlugin. Health from NVML
// events arrives with the health issue.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Slices discovers the GPUs of cfg and returns the ResourceSlices the plugin
// would publish, without registering or talking to the API server: what an
// operator checks before rolling the plugin out to a node.
func Slices(ctx context.Context, cfg Config) ([]*resourceapi.ResourceSlice, error) {
	inv, err := inventory.Discover(ctx, cfg.NVML, cfg.InventoryOptions)
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	resources, err := resourceslices.DriverResources(cfg.NodeName, inv)
	if err != nil {
		return nil, fmt.Errorf("building ResourceSlices: %w", err)
	}
	return resourceslices.Objects(v1alpha1.DriverName, resources), nil
}
