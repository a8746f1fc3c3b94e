// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command gpufrac-kubelet-plugin is the node side of gpufrac: it registers
// with the kubelet, publishes the node's GPUs as ResourceSlices and prepares
// claims. All logic lives in internal/node/plugin (and internal/sim/simnode
// for --simulate-gpus); this file is flags and wiring.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/buildinfo"
	"github.com/gpufrac/gpufrac/internal/featureprobe"
	"github.com/gpufrac/gpufrac/internal/flagcheck"
	"github.com/gpufrac/gpufrac/internal/metricsserver"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/internal/node/driverspec"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/internal/node/mps/launcher"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/internal/sim/simnode"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

type flags struct {
	nodeName            string
	kubeconfig          string
	kubeAPIQPS          float32
	kubeAPIBurst        int
	pluginDataDir       string
	registrarDir        string
	cdiRoot             string
	cdiHookPath         string
	cgroupRoot          string
	driverRoot          string
	simulateCgroup      string
	simulateUndelegated string
	metricsAddress      string
	simulateGPUs        string
	simulateEnforcement string
	printSlices         bool
	namespace           string
	mpsDaemonImage      string
	driverRootMount     string
	devRoot             string
	mpsTemplate         string
	mpsReadyTimeout     time.Duration
	mpsSafetyMiB        int64
	mpsSafetyPercent    int
	mpsServerReserveMiB int64
	mpsServerScope      string
	statusClearDelay    time.Duration
	statusBurstQuiet    time.Duration
	sliceOrderInterval  time.Duration
	smSharingGPUs       string
	ignoredXIDs         []uint
	podUID              string
	hardLimitBand       string
	shmSize             string
	nvidiaRuntimeConfig string
	logging             *logsapi.LoggingConfiguration
}

func main() {
	os.Exit(cli.Run(newCommand()))
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func newCommand() *cobra.Command {
	f := &flags{logging: logsapi.NewLoggingConfiguration()}
	cmd := &cobra.Command{
		Use:          "gpufrac-kubelet-plugin",
		Short:        "gpufrac's kubelet plugin: publishes GPUs with consumable memory and prepares fractional GPU claims",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if err := logsapi.ValidateAndApply(f.logging, nil); err != nil {
				return err
			}
			return run(cmd.Context(), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nodeName, "node-name", envOr("NODE_NAME", ""), "name of this node (env NODE_NAME)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", envOr("KUBECONFIG", ""), "kubeconfig file; empty means in-cluster (env KUBECONFIG)")
	// The DRA helper GETs every claim before Prepare; client-go's default
	// of 5 QPS would cap Prepare at 5 claims per second.
	fs.Float32Var(&f.kubeAPIQPS, "kube-api-qps", 50, "sustained queries per second to the API server")
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 100, "burst of queries to the API server")
	fs.StringVar(&f.pluginDataDir, "plugin-data-dir", envOr("PLUGIN_DATA_DIR", "/var/lib/kubelet/plugins/gpufrac.dev"), "directory for the DRA socket and the checkpoint")
	fs.StringVar(&f.registrarDir, "registrar-dir", envOr("REGISTRAR_DIR", "/var/lib/kubelet/plugins_registry"), "kubelet plugin registration directory")
	fs.StringVar(&f.cdiRoot, "cdi-root", envOr("CDI_ROOT", "/var/run/cdi"), "directory for CDI specs of prepared claims")
	fs.StringVar(&f.cdiHookPath, "cdi-hook-path", envOr("CDI_HOOK_PATH", "/var/lib/gpufrac/bin/gpufrac-cdi-hook"),
		"host path of gpufrac-cdi-hook, which CDI specs run when a container is created")
	fs.StringVar(&f.driverRoot, "driver-root", envOr("NVIDIA_DRIVER_ROOT", "/"),
		"host path of the NVIDIA driver installation (the chart's nvidiaDriverRoot: / for a driver on the host, /run/nvidia/driver with the GPU Operator); gpufrac-cdi-hook loads NVML under it and every claim's CDI spec mounts the driver's libraries and binaries from it (env NVIDIA_DRIVER_ROOT)")
	fs.StringVar(&f.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "mount point of the cgroup hierarchy (dmem enforcement needs cgroup v2)")
	fs.StringVar(&f.metricsAddress, "metrics-address", envOr("METRICS_ADDRESS", ":8080"), "address for /metrics and /healthz; empty disables")
	fs.StringVar(&f.simulateGPUs, "simulate-gpus", envOr("SIMULATE_GPUS", ""),
		fmt.Sprintf("simulate GPUs instead of using NVML, e.g. h200x8 or h100x4,a100x4, with MIG instances on a group: h100x1,a100x1:mig=3g.40gb+1g.10gb (models: %v)", catalog.Models()))
	fs.StringVar(&f.simulateEnforcement, "simulate-enforcement", envOr("SIMULATE_ENFORCEMENT", string(domain.EnforcementDMem)),
		"with --simulate-gpus: the driver to simulate: dmem (r615, per-cgroup limits), mps (older driver, legacy MPS), none (older driver, no MPS)")
	fs.StringVar(&f.simulateCgroup, "simulate-cgroup", "v2",
		"with --simulate-gpus: the node's cgroup hierarchy, v2 or v1 (where no driver sets per-cgroup limits)")
	fs.StringVar(&f.simulateUndelegated, "simulate-dmem-undelegated", "",
		"with --simulate-gpus: a cgroup below the hierarchy's mount (e.g. kubepods) whose cgroup.subtree_control lacks +dmem; empty: dmem delegated all the way down")
	fs.StringVar(&f.namespace, "namespace", envOr("POD_NAMESPACE", "gpufrac-system"), "the plugin's namespace, where MPS daemon Pods run (env POD_NAMESPACE)")
	fs.StringVar(&f.mpsDaemonImage, "mps-daemon-image", envOr("MPS_DAEMON_IMAGE", ""),
		"this plugin's own image, which the MPS control daemon Pods run: its gpufrac-mps-launcher runs the node's nvidia-cuda-mps-control under --driver-root (the chart sets it; env MPS_DAEMON_IMAGE); empty turns MPS off on this node")
	fs.StringVar(&f.driverRootMount, "driver-root-mount", "",
		"where this process sees --driver-root (the chart mounts it at /driver-root); nvidia-cuda-mps-control and the driver's files are looked up under it; default --driver-root")
	fs.StringVar(&f.devRoot, "dev-root", envOr("NVIDIA_DEV_ROOT", ""),
		"host path of the root the NVIDIA device nodes are under (env NVIDIA_DEV_ROOT); default --driver-root where it has a dev folder (the GPU Operator's), else /")
	fs.StringVar(&f.mpsTemplate, "mps-template", envOr("MPS_TEMPLATE", ""), "file with the MPS daemon Pod template; empty uses the built-in templates/mps-control-daemon.yaml")
	fs.Int64Var(&f.mpsSafetyMiB, "mps-default-namespace-memory-mib", mps.DefaultSafetyLimits.PinnedMemoryMiB,
		"pinned memory limit (MiB, at least 1) of the MPS v3 shared server's default namespace, where only a misrouted client lands")
	fs.IntVar(&f.mpsSafetyPercent, "mps-default-namespace-thread-percentage", mps.DefaultSafetyLimits.ActiveThreadPercentage,
		"active thread percentage (1 to 100) of the MPS v3 shared server's default namespace")
	fs.Int64Var(&f.mpsServerReserveMiB, "mps-server-reserve-mib", domain.DefaultServerReserveMiB,
		"MiB of each GPU kept back from its published memory for the MPS server's own context, on nodes that run MPS daemons (0 to 'below the GPU's memory'; the default is inferred: docs/enforcement.md)")
	fs.StringVar(&f.mpsServerScope, "mps-server-scope", domain.MPSServerScopeGPU,
		"which MPS daemons serve the node's fractions: gpu (one daemon per GPU: a daemon's restart touches one GPU's tenants) or node (MPS v3 only: one server over every fraction GPU of the node, which admits claims whose MPS shares span GPUs, and whose restart ends the MPS clients of every GPU); slices say it as mpsServerScope")
	fs.DurationVar(&f.statusClearDelay, "status-clear-delay", claimstatus.DefaultClearDelay,
		"how long the write clearing an unprepared claim's status.devices waits, at most 10m; a claim prepared again, deleted or deallocated meanwhile needs none (0: at once)")
	fs.DurationVar(&f.statusBurstQuiet, "status-burst-quiet", claimstatus.DefaultBurstQuiet,
		"a prepared claim's status.devices write waits until no Prepare came for this long (at most 1s), so a burst of Prepares (a node's pods after a reboot) is not slowed by its status writes (0: at once)")
	fs.DurationVar(&f.sliceOrderInterval, "slice-order-interval", plugin.DefaultSliceOrderInterval,
		"publish this node's GPUs fullest first, so the scheduler's first fit inside the node is a best fit, and republish the slice when prepared claims change that order at most once per this interval, at most 10m (0: GPU index order, no republishing)")
	fs.DurationVar(&f.mpsReadyTimeout, "mps-ready-timeout", 60*time.Second, "how long Prepare waits for a new MPS daemon to become ready, from 1s to 1h")
	fs.StringVar(&f.smSharingGPUs, "sm-sharing-gpus", envOr("SM_SHARING_GPUS", ""),
		"reserve GPUs for SMSharing: all, none, or indices such as 0,1 (the others serve TimeSlicing); empty lets every GPU serve either mode, one at a time")
	fs.UintSliceVar(&f.ignoredXIDs, "ignored-xids", []uint{13, 31, 43, 45, 68, 109},
		"XIDs caused by applications, which do not make a GPU unhealthy")
	fs.StringVar(&f.podUID, "pod-uid", envOr("POD_UID", ""),
		"this pod's UID (env POD_UID, from the downward API): lets a new plugin pod register beside the old one during a DaemonSet rolling update and take over when it exits (kubelet 1.33 or later); empty turns rolling updates off")
	fs.StringVar(&f.hardLimitBand, "hard-limit-band", envOr("HARD_LIMIT_BAND", incident.DefaultBand.String()),
		"how close to its GPU-memory hard limit a container counts as at it (GPUMemoryAtHardLimit): <quantity>,<percent>%, whichever is more; at least the allocation your workloads make at the wall (docs/incidents.md)")
	fs.StringVar(&f.shmSize, "shm-size", envOr("SHM_SIZE", ""),
		"size of the tmpfs each fraction container gets on /dev/shm, its own (a quantity such as 8Gi; env SHM_SIZE); empty: half of the node's memory, as NVIDIA's DRA driver sizes its per-claim MPS shm; it replaces any /dev/shm volume of the pod")
	fs.StringVar(&f.nvidiaRuntimeConfig, "nvidia-runtime-config", envOr("NVIDIA_RUNTIME_CONFIG", ""),
		"the host's NVIDIA container runtime config.toml (usually /etc/nvidia-container-runtime/config.toml, seen through a read-only mount); where it accepts NVIDIA_VISIBLE_DEVICES from unprivileged containers the slices say so and the Node gets a Warning Event; empty: not read")
	fs.BoolVar(&f.printSlices, "print-slices", false, "print the ResourceSlices this node would publish as YAML and exit; needs no API server")
	logsapi.AddFlags(f.logging, fs)
	addFailpointFlags(cmd)
	return cmd
}

// check refuses, before anything starts, a flag value the plugin cannot
// work with, naming the flag, the value and the rule. The node name
// becomes the pool's name and a path element of the plugin's state.
func (f *flags) check() error {
	return flagcheck.All(
		flagcheck.DNSSubdomain("--node-name", f.nodeName),
		flagcheck.DNSLabel("--namespace", f.namespace),
		flagcheck.KubeAPI(f.kubeAPIQPS, f.kubeAPIBurst),
		flagcheck.AbsPath("--plugin-data-dir", f.pluginDataDir),
		flagcheck.AbsPath("--registrar-dir", f.registrarDir),
		flagcheck.AbsPath("--cdi-root", f.cdiRoot),
		flagcheck.AbsPath("--cdi-hook-path", f.cdiHookPath),
		flagcheck.AbsPath("--driver-root", f.driverRoot),
		flagcheck.AbsPath("--cgroup-root", f.cgroupRoot),
		flagcheck.OptionalAbsPath("--driver-root-mount", f.driverRootMount),
		flagcheck.OptionalAbsPath("--mps-template", f.mpsTemplate),
		flagcheck.OptionalAbsPath("--dev-root", f.devRoot),
		flagcheck.OptionalAbsPath("--nvidia-runtime-config", f.nvidiaRuntimeConfig),
		// 1 TiB bounds the arithmetic; a reserve at or above a GPU's own
		// memory is refused once the inventory is known.
		flagcheck.Int("--mps-server-reserve-mib", f.mpsServerReserveMiB, 0, 1<<20),
		flagcheck.OneOf("--mps-server-scope", f.mpsServerScope, domain.MPSServerScopeGPU, domain.MPSServerScopeNode),
		flagcheck.Duration("--status-clear-delay", f.statusClearDelay, 0, 10*time.Minute),
		flagcheck.Duration("--status-burst-quiet", f.statusBurstQuiet, 0, claimstatus.DefaultBurstMax),
		flagcheck.Duration("--slice-order-interval", f.sliceOrderInterval, 0, 10*time.Minute),
		flagcheck.Duration("--mps-ready-timeout", f.mpsReadyTimeout, time.Second, time.Hour),
	)
}

func run(ctx context.Context, f *flags) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// A signal is an orderly stop; a fatal background error is not, and the
	// exit code must tell them apart.
	fatal := make(chan error, 1)
	logger := klog.FromContext(ctx)
	logger.Info("Starting gpufrac-kubelet-plugin", "version", buildinfo.Version, "node", f.nodeName)

	cfg, err := newConfig(ctx, f, fatal)
	if err != nil {
		return err
	}
	if f.printSlices {
		return printSlices(ctx, cfg)
	}
	if cfg.KubeClient, err = newKubeClient(f); err != nil {
		return err
	}
	// Before anything is published: an API server that would drop the
	// slices' capacity or taints refuses the plugin here, by name.
	if err := featureprobe.Plugin(ctx, cfg.KubeClient, f.nodeName); err != nil {
		return err
	}

	// /healthz dials the plugin's own sockets once it has started; before,
	// discovery and recovery are still running and it answers ok.
	var started atomic.Pointer[plugin.Plugin]
	if f.metricsAddress != "" {
		stopServer, err := serveMetrics(ctx, f.metricsAddress, &cfg, &started)
		if err != nil {
			return err
		}
		// Stopped after the plugin (deferred calls run last first).
		defer stopServer()
	}

	plugin, err := plugin.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer plugin.Stop()
	started.Store(plugin)
	select {
	case <-ctx.Done():
		logger.Info("Kubelet plugin stopping", "reason", context.Cause(ctx))
		return nil
	case err := <-fatal:
		return fmt.Errorf("kubelet plugin stopped: %w", err)
	}
}

// newConfig builds the plugin's configuration from the flags: a fatal
// background error is sent to fatal.
func newConfig(ctx context.Context, f *flags, fatal chan<- error) (plugin.Config, error) {
	bootID, err := checkpoint.BootID()
	if err != nil {
		return plugin.Config{}, err
	}
	band, err := incident.ParseBand(f.hardLimitBand)
	if err != nil {
		return plugin.Config{}, fmt.Errorf("--hard-limit-band: %w", err)
	}
	shmSize, err := cdispec.ShmSize(f.shmSize, "/proc/meminfo")
	if err != nil {
		return plugin.Config{}, err
	}
	cfg := plugin.Config{
		HardLimitBand: band,
		NodeName:      f.nodeName,
		PluginDataDir: f.pluginDataDir,
		RegistrarDir:  f.registrarDir,
		CDIRoot:       f.cdiRoot,
		BootID:        bootID,
		SMSharingGPUs: f.smSharingGPUs,
		// The kubelet tells plugin instances apart by this pod UID.
		RollingUpdateUID:    types.UID(f.podUID),
		NVIDIARuntimeConfig: f.nvidiaRuntimeConfig,
		MPS: plugin.MPSConfig{
			Namespace: f.namespace, Image: f.mpsDaemonImage,
			DefaultNamespaceLimits: mps.NamespaceLimits{PinnedMemoryMiB: f.mpsSafetyMiB, ActiveThreadPercentage: f.mpsSafetyPercent}, Template: templates.MPSControlDaemon, ReadyTimeout: f.mpsReadyTimeout,
			ServerReserveMiB: f.mpsServerReserveMiB,
			ServerScope:      f.mpsServerScope,
		},
		CDI:                cdispec.Options{HookPath: f.cdiHookPath, DriverRoot: f.driverRoot, DeviceNode: cdispec.HostDeviceNode, MIGCaps: cdispec.HostMIGCaps("/"), ShmSizeBytes: shmSize},
		Failpoint:          failpointHook(),
		StatusClearDelay:   f.statusClearDelay,
		StatusBurstQuiet:   f.statusBurstQuiet,
		SliceOrderInterval: f.sliceOrderInterval,
		OnFatal: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		},
		InventoryOptions: nvmldiscovery.Options{
			CgroupRoot: f.cgroupRoot,
		},
	}
	if f.simulateGPUs != "" {
		if err := simulate(ctx, f, &cfg); err != nil {
			return plugin.Config{}, err
		}
	} else {
		cfg.NVML = nvml.New()
		// The daemon Pods run the driver root's own MPS binaries: MPS is
		// available where the driver root has them.
		mount := cmp.Or(f.driverRootMount, f.driverRoot)
		cfg.InventoryOptions.LookPath = func(file string) (string, error) { return launcher.FindInRoot(mount, file) }
		cfg.InventoryOptions.PCIeRoot = plugin.HostPCIeRoot
		if err := realDriverFiles(f, &cfg); err != nil {
			return plugin.Config{}, err
		}
	}

	for _, x := range f.ignoredXIDs {
		cfg.Health.IgnoredXIDs = append(cfg.Health.IgnoredXIDs, uint64(x))
	}
	if err := cfg.MPS.DefaultNamespaceLimits.Validate(); err != nil {
		return plugin.Config{}, fmt.Errorf("--mps-default-namespace-memory-mib, --mps-default-namespace-thread-percentage: %w", err)
	}
	if f.mpsTemplate != "" {
		raw, err := os.ReadFile(f.mpsTemplate)
		if err != nil {
			return plugin.Config{}, fmt.Errorf("--mps-template: %w", err)
		}
		cfg.MPS.Template = string(raw)
	}
	return cfg, nil
}

// realDriverFiles makes the specs carry the driver's files and read the
// device nodes under the dev root (internal/node/driverspec): a node
// without the driver's libraries under --driver-root cannot run CUDA in
// its containers, so the plugin does not start.
func realDriverFiles(f *flags, cfg *plugin.Config) error {
	mount := cmp.Or(f.driverRootMount, f.driverRoot)
	driver, err := driverspec.Discover(driverspec.Options{Root: f.driverRoot, LookupRoot: mount})
	if err != nil {
		return fmt.Errorf("--driver-root %s: %w", f.driverRoot, err)
	}
	cfg.CDI.Driver = driver.Edits(f.driverRoot, f.cdiHookPath)
	devRoot, devMount := f.devRoot, f.devRoot
	if devRoot == "" {
		devRoot = driverspec.DevRoot(f.driverRoot, mount)
		devMount = "/"
		if devRoot != "/" {
			devMount = mount
		}
	}
	cfg.CDI.DeviceNode = driverspec.DeviceNodeUnder(devRoot, devMount)
	return nil
}

// simulate points cfg at the simulated node the --simulate-* flags
// describe (internal/sim/simnode).
func simulate(ctx context.Context, f *flags, cfg *plugin.Config) error {
	enforcement, err := domain.ParseEnforcement(f.simulateEnforcement)
	if err != nil {
		return fmt.Errorf("--simulate-enforcement: %w", err)
	}
	if f.simulateCgroup != "v1" && f.simulateCgroup != "v2" {
		return fmt.Errorf("--simulate-cgroup %q: want v1 or v2", f.simulateCgroup)
	}
	node, err := gpusim.NewNodeWith(f.simulateGPUs, f.nodeName, gpusim.NodeOptions{Enforcement: enforcement, CgroupV1: f.simulateCgroup == "v1",
		DmemUndelegated: f.simulateUndelegated})
	if err != nil {
		return fmt.Errorf("--simulate-gpus: %w", err)
	}
	lib, err := simnode.Configure(cfg, node, simnode.Paths{DriverRoot: f.driverRoot, DataDir: f.pluginDataDir})
	if err != nil {
		return err
	}
	// The simulated driver root may hold a (stub) driver's files, which
	// the specs then carry as on a real node; one without them (most test
	// tiers) gives specs without driver files.
	driver, err := driverspec.Discover(driverspec.Options{Root: cfg.CDI.DriverRoot})
	switch {
	case errors.Is(err, driverspec.ErrNoDriver):
		klog.FromContext(ctx).Info("The simulated driver root holds no driver libraries: CDI specs carry no driver files", "driverRoot", cfg.CDI.DriverRoot)
	case err != nil:
		return err
	default:
		cfg.CDI.Driver = driver.Edits(cfg.CDI.DriverRoot, f.cdiHookPath)
		klog.FromContext(ctx).Info("CDI specs carry the simulated driver root's files", "driverRoot", cfg.CDI.DriverRoot, "version", driver.Version,
			"libraries", driver.Libraries, "binaries", driver.Binaries)
	}
	klog.FromContext(ctx).Info("Simulating GPUs: no NVML, no real GPU is touched", "gpus", f.simulateGPUs, "driver", enforcement,
		"cgroup", f.simulateCgroup, "simulatedDriver", lib)
	return nil
}

func newKubeClient(f *flags) (kubernetes.Interface, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %q: %w", f.kubeconfig, err)
	}
	restConfig.QPS, restConfig.Burst = f.kubeAPIQPS, f.kubeAPIBurst
	restConfig.UserAgent = "gpufrac-kubelet-plugin"
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return client, nil
}

// serveMetrics serves /metrics from a registry it sets as cfg.Metrics, and
// /healthz from the plugin once started holds it. The server outlives
// ctx's cancellation until the returned stop is called, so a stopping
// plugin's last metrics and health are still served.
func serveMetrics(ctx context.Context, address string, cfg *plugin.Config, started *atomic.Pointer[plugin.Plugin]) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = reg
	serverCtx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	_, stopped, err := metricsserver.StartWithChecks(serverCtx, address, reg, metricsserver.Checks{
		Healthz: func() error {
			if p := started.Load(); p != nil {
				return p.Healthz(ctx)
			}
			return nil
		},
	})
	if err != nil {
		stopServer()
		return nil, err
	}
	return func() { stopServer(); <-stopped }, nil
}

func printSlices(ctx context.Context, cfg plugin.Config) error {
	slices, err := plugin.Slices(ctx, cfg)
	if err != nil {
		return err
	}
	return plugin.WriteSlices(os.Stdout, slices)
}
