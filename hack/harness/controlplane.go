// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	// stopGrace is how long a component may take to exit after SIGTERM.
	stopGrace = 15 * time.Second
)

// Options configure a control plane.
type Options struct {
	// Dir keeps the logs, certificates, kubeconfigs, CDI specs and the
	// kubelet stand-ins' records. Empty means a new directory under the
	// system's temporary directory.
	Dir string
	// KeepDir keeps Dir after Close (the demo shows what is in it). Sockets
	// and etcd's data always go.
	KeepDir bool
	// Progress receives step names and elapsed times; nil discards them.
	Progress io.Writer
	// Binaries are the upstream binaries; nil finds them in the cache or
	// builds them (kubebuild.Ensure).
	Binaries kubebuild.Binaries
	// PluginBinary is a built gpufrac-kubelet-plugin; empty builds one from
	// the checkout into Dir/bin, so that `go test` alone tests this tree.
	PluginBinary string
	// SchedulerArgs and ControllerManagerArgs are extra flags for
	// kube-scheduler and kube-controller-manager (benchmarks lift their
	// client QPS with --kube-api-qps and --kube-api-burst).
	SchedulerArgs, ControllerManagerArgs []string
	// APIServerArgs are extra flags for kube-apiserver (a test turns a
	// feature gate off with --feature-gates).
	APIServerArgs []string
	// SchedulerConfig, when set, is a KubeSchedulerConfiguration (YAML)
	// kube-scheduler runs with (--config) in place of --kubeconfig; the
	// harness fills in clientConnection.kubeconfig (schedconfig.go).
	// Scheduler flags that --config overrides must then be in it.
	SchedulerConfig []byte
	// Workloads makes the control plane run a chart's DaemonSets and
	// Deployments on real nodes: their controllers, a pod network the API
	// server routes to, and an API server pods reach (workloads.go).
	Workloads bool
}

// ControlPlane is a running etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager on loopback, plus the simulated nodes added to it.
type ControlPlane struct {
	// Dir holds everything the control plane writes except sockets and
	// etcd's data (see Options.Dir).
	Dir string
	// Kubeconfig is an admin (system:masters) kubeconfig for kubectl.
	Kubeconfig string
	// RestConfig and Client are the admin's.
	RestConfig *rest.Config
	Client     kubernetes.Interface
	// PluginBinary is the gpufrac-kubelet-plugin the nodes run.
	PluginBinary string
	// PodNetwork is the real nodes' pod network; nil without
	// Options.Workloads.
	PodNetwork *PodNetwork
	// KubeVersion is the Kubernetes release of the control plane and of
	// the real nodes' kubelets (kubebuild.VersionEnv selects it).
	KubeVersion string

	opts     Options
	runDir   string // short path for sockets, etcd's data and an owned Dir
	progress *kubebuild.Progress
	pki      *pki
	server   string

	imageMu      sync.Mutex
	imageArchive string // NodeImage, built on the first real node

	mu sync.Mutex
	// The MPS double the stand-ins run daemon Pods with, built once.
	mpsOnce   sync.Once
	mpsTools  string
	mpsErr    error
	procs     []*process // in start order
	nodes     []*Node
	realNodes []*RealNode
	peaks     map[string]uint64
	closed    bool
}

// Start builds what is missing, starts the control plane and waits until
// every component is ready. On error everything started is stopped again.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, finalErr error) {
	logger := klog.FromContext(ctx)
	sweepStale(logger)
	runDir, err := os.MkdirTemp("", runDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("creating the harness directory: %w", err)
	}
	cp := &ControlPlane{opts: opts, runDir: runDir, progress: kubebuild.NewProgress(opts.Progress), peaks: map[string]uint64{}}
	defer func() {
		if finalErr != nil {
			tails := cp.logTails(40)
			_ = cp.Close()
			finalErr = fmt.Errorf("%w\n%s", finalErr, tails)
		}
	}()
	cp.Dir = opts.Dir
	if cp.Dir == "" {
		cp.Dir = filepath.Join(runDir, "state")
	}
	if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return cp, fmt.Errorf("creating %s: %w", cp.Dir, err)
	}

	if cp.KubeVersion, err = kubebuild.Selected(); err != nil {
		return cp, err
	}
	bins := opts.Binaries
	if bins == nil {
		if bins, err = kubebuild.Ensure(ctx, kubebuild.Options{Progress: opts.Progress, Version: cp.KubeVersion}); err != nil {
			return cp, err
		}
	}
	cp.PluginBinary = opts.PluginBinary
	if cp.PluginBinary == "" {
		root, err := kubebuild.RepoRoot()
		if err != nil {
			return cp, err
		}
		binDir := filepath.Join(cp.Dir, "bin")
		if err := kubebuild.BuildPlugin(ctx, cp.progress, root, binDir); err != nil {
			return cp, err
		}
		cp.PluginBinary = filepath.Join(binDir, "gpufrac-kubelet-plugin")
	}

	end := cp.progress.Step("Starting etcd, kube-apiserver, kube-scheduler and kube-controller-manager " + cp.KubeVersion + " on 127.0.0.1")
	err = cp.startComponents(ctx, bins)
	end(err)
	if err != nil {
		return cp, err
	}
	return cp, nil
}

func (cp *ControlPlane) startComponents(ctx context.Context, bins kubebuild.Binaries) error {
	var err error
	bindAddress := "127.0.0.1"
	var podIPs []net.IP
	// resourcequota-controller: a ResourceQuota admits nothing until it
	// has computed the quota's status (TestResourceQuotaLimitsTranslatedClaims).
	controllers := []string{"serviceaccount-controller", "resourceclaim-controller", "garbage-collector-controller", "resourcequota-controller"}
	if cp.opts.Workloads {
		if cp.PodNetwork, err = newPodNetwork(); err != nil {
			return err
		}
		bindAddress = "0.0.0.0"
		podIPs = append(podIPs, net.ParseIP(cp.PodNetwork.Gateway))
		controllers = append(controllers, workloadControllers...)
	}
	if cp.pki, err = newPKI(filepath.Join(cp.Dir, "pki"), podIPs...); err != nil {
		return err
	}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cp.server = "https://127.0.0.1:" + strconv.Itoa(ports[2])

	etcd, err := cp.start("etcd", bins[kubebuild.Etcd],
		"--name=harness", "--data-dir="+filepath.Join(cp.runDir, "etcd-data"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=harness="+peerURL,
		// A test cluster: losing it on a power cut is fine, waiting for
		// fsync on every write is not.
		"--unsafe-no-fsync=true", "--log-level=warn")
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, etcd, etcdURL+"/health", nil, `"health":"true"`, time.Minute); err != nil {
		return err
	}

	p := cp.pki
	cp.Kubeconfig, err = p.kubeconfig("admin", cp.server, "gpufrac-harness-admin", "system:masters")
	if err != nil {
		return err
	}
	schedKubeconfig, err := p.kubeconfig("kube-scheduler", cp.server, "system:kube-scheduler")
	if err != nil {
		return err
	}
	cmKubeconfig, err := p.kubeconfig("kube-controller-manager", cp.server, "system:kube-controller-manager")
	if err != nil {
		return err
	}

	apiserver, err := cp.start("kube-apiserver", bins[kubebuild.KubeAPIServer], append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + bindAddress, "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[2]),
		// No kubernetes Service endpoints to maintain: nothing runs in pods.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-apiserver"),
		"--tls-cert-file=" + p.ServingCert, "--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CAFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.SAPublic, "--service-account-signing-key-file=" + p.SAPrivate,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		// As kubeadm and every real cluster: the plugin's MPS daemon Pods
		// run privileged.
		"--allow-privileged=true",
		"--profiling=false",
		// Workloads: Services are reached at their endpoints (no kube-proxy).
		"--enable-aggregator-routing=" + strconv.FormatBool(cp.opts.Workloads)}, cp.opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	if cp.RestConfig, err = clientcmd.BuildConfigFromFlags("", cp.Kubeconfig); err != nil {
		return fmt.Errorf("loading the admin kubeconfig: %w", err)
	}
	cp.RestConfig.QPS, cp.RestConfig.Burst = 200, 400
	if cp.Client, err = kubernetes.NewForConfig(cp.RestConfig); err != nil {
		return fmt.Errorf("creating the admin client: %w", err)
	}
	if err := cp.waitAPIServer(ctx, apiserver); err != nil {
		return err
	}

	schedConfig := "--kubeconfig=" + schedKubeconfig
	if len(cp.opts.SchedulerConfig) > 0 {
		if schedConfig, err = cp.writeSchedulerConfig(schedKubeconfig); err != nil {
			return err
		}
	}
	scheduler, err := cp.start("kube-scheduler", bins[kubebuild.KubeScheduler], append([]string{
		schedConfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[3]),
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-scheduler")}, cp.opts.SchedulerArgs...)...)
	if err != nil {
		return err
	}
	cm, err := cp.start("kube-controller-manager", bins[kubebuild.KubeControllerMgr], append([]string{
		"--kubeconfig=" + cmKubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[4]),
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-controller-manager"),
		// Under RBAC each controller needs its own service account to be
		// allowed what it does (the resourceclaim controller creates claims).
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.SAPrivate, "--root-ca-file=" + p.CAFile,
		// Without a kubelet there is no node lifecycle to manage; these are
		// what pods with claims need, and they start fastest (Workloads
		// adds what a chart's objects need).
		"--controllers=" + strings.Join(controllers, ","),
	}, cp.opts.ControllerManagerArgs...)...)
	if err != nil {
		return err
	}
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // self-signed serving certs of loopback components
	if err := waitHTTP(ctx, scheduler, "https://127.0.0.1:"+strconv.Itoa(ports[3])+"/readyz", insecure, "ok", time.Minute); err != nil {
		return err
	}
	return waitHTTP(ctx, cm, "https://127.0.0.1:"+strconv.Itoa(ports[4])+"/healthz", insecure, "ok", time.Minute)
}

// waitAPIServer waits for /readyz: etcd reachable, RBAC bootstrap roles and
// priority levels in place.
func (cp *ControlPlane) waitAPIServer(ctx context.Context, proc *process) error {
	pool := x509.NewCertPool()
	pool.AddCert(cp.pki.ca)
	admin, err := rest.TLSConfigFor(cp.RestConfig)
	if err != nil {
		return fmt.Errorf("building the admin TLS config: %w", err)
	}
	admin.RootCAs = pool
	return waitHTTP(ctx, proc, cp.server+"/readyz", admin, "ok", 2*time.Minute)
}

func (cp *ControlPlane) start(name, bin string, args ...string) (*process, error) {
	if bin == "" {
		return nil, fmt.Errorf("no binary for %s", name)
	}
	proc, err := startProcess(name, filepath.Join(cp.Dir, name), bin, args, nil)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, proc)
	cp.mu.Unlock()
	return proc, nil
}

// waitHTTP polls url until it answers 200 with a body containing want. It
// gives up early when proc exits.
func waitHTTP(ctx context.Context, proc *process, url string, tlsConfig *tls.Config, want string, timeout time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		if gone, err := proc.exited(); gone {
			return fmt.Errorf("waiting for %s to become ready: %w", proc.name, err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("building a readiness request: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %s (last answer: %s)", proc.name, url, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Close stops the nodes (kubelet stand-ins, then plugins), then the
// controller-manager and scheduler, then the API server, then etcd: each by
// the PID the harness started, SIGTERM first. It removes the sockets and
// etcd's data, and Dir unless KeepDir. Safe to call more than once.
func (cp *ControlPlane) Close() error {
	cp.mu.Lock()
	if cp.closed {
		cp.mu.Unlock()
		return nil
	}
	cp.closed = true
	nodes := slices.Clone(cp.nodes)
	realNodes := slices.Clone(cp.realNodes)
	procs := slices.Clone(cp.procs)
	cp.mu.Unlock()

	var errs []error
	for _, n := range realNodes {
		errs = append(errs, n.Stop())
	}
	for _, n := range nodes {
		errs = append(errs, n.Stop())
	}
	// Clients of the API server go first, or it waits for their watches.
	slices.Reverse(procs)
	for _, proc := range procs {
		cp.recordPeak(proc)
		errs = append(errs, proc.stop(stopGrace))
	}
	if err := os.RemoveAll(cp.runDir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", cp.runDir, err))
	}
	if !cp.opts.KeepDir && cp.opts.Dir != "" {
		if err := os.RemoveAll(cp.opts.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", cp.opts.Dir, err))
		}
	}
	return errors.Join(errs...)
}

func (cp *ControlPlane) recordPeak(proc *process) {
	peak := proc.peak()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.peaks[proc.name] = max(cp.peaks[proc.name], peak)
}

// PeakRSS returns the peak resident memory in bytes of each component the
// harness started (control plane and plugins), sampled from /proc up to now
// (or up to its stop).
func (cp *ControlPlane) PeakRSS() map[string]uint64 {
	cp.mu.Lock()
	procs := slices.Clone(cp.procs)
	for _, n := range cp.nodes {
		procs = append(procs, n.plugin) // cp.mu held
	}
	for _, n := range cp.realNodes {
		procs = append(procs, n.processes()...)
	}
	cp.mu.Unlock()
	for _, proc := range procs {
		cp.recordPeak(proc)
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make(map[string]uint64, len(cp.peaks))
	for k, v := range cp.peaks {
		out[k] = v
	}
	return out
}

// ControlPlanePeakRSS is the sum of the peak resident memory of etcd and the
// three Kubernetes components: an upper bound of the control plane's peak.
func (cp *ControlPlane) ControlPlanePeakRSS() uint64 {
	var sum uint64
	peaks := cp.PeakRSS()
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		sum += peaks[name]
	}
	return sum
}

// LogTails writes the last lines of every component's log to w: what a
// failing test prints.
func (cp *ControlPlane) LogTails(w io.Writer, lines int) {
	_, _ = io.WriteString(w, cp.logTails(lines))
}

func (cp *ControlPlane) logTails(lines int) string {
	cp.mu.Lock()
	procs := slices.Clone(cp.procs)
	for _, n := range cp.nodes {
		procs = append(procs, n.plugin) // cp.mu held
	}
	for _, n := range cp.realNodes {
		procs = append(procs, n.processes()...)
	}
	cp.mu.Unlock()
	var b strings.Builder
	for _, proc := range procs {
		state := "running"
		if gone, err := proc.exited(); gone {
			state = err.Error()
		}
		_, _ = fmt.Fprintf(&b, "----- %s (%s), last %d lines of %s -----\n%s\n", proc.name, state, lines, proc.logPath, proc.tail(lines))
	}
	return b.String()
}
