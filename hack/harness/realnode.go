// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/nodebuild"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// RealNodeOptions describe a real node: the upstream kubelet, containerd
// and runc running pods for real, with gpufrac-kubelet-plugin on simulated
// GPUs registered with the kubelet.
type RealNodeOptions struct {
	// Name of the Node (the kubelet registers it); keep it short.
	Name string
	// GPUs and Enforcement as for NodeOptions.
	GPUs, Enforcement string
	// PluginArgs are extra flags for gpufrac-kubelet-plugin.
	PluginArgs []string
	// ChartPlugin leaves the plugin to a chart's DaemonSet: the harness
	// starts no plugin process and waits for no ResourceSlice. Needs a
	// control plane with Options.Workloads; the node's pods then get the
	// pod network of workloads.go.
	ChartPlugin bool
	// Labels are the Node's labels besides gpufrac.dev/real-node=true.
	Labels map[string]string
	// StubDriver puts the stub driver (InstallStubDriver) in the node's
	// driver root before the plugin starts, so every claim's CDI spec
	// carries driver files.
	StubDriver bool
}

// ChartPluginDataDir is the chart's plugin data directory (its default
// kubeletDir), inside the real node's mount namespace.
const ChartPluginDataDir = kubeletRootDir + "/plugins/gpufrac.dev"

// RealNode is a kubelet v1.37 with containerd and runc, in a private mount
// namespace, and the plugin registered with it. SMSharing is on: the plugin
// runs its MPS daemon Pods from NodeImage, where the MPS double answers.
type RealNode struct {
	Name string
	// CDIRoot is the plugin's --cdi-root and containerd's cdi_spec_dirs.
	CDIRoot string
	// PluginDataDir holds the DRA socket, the checkpoint and, on this
	// simulated node, LimitRecord. A path in the node's mount namespace
	// (ReadFile reads it): ChartPluginDataDir with ChartPlugin.
	PluginDataDir string
	// LimitRecord is where gpufrac-cdi-hook records the limits it set, one
	// gpusim.LimitRecord per line.
	LimitRecord string
	// LogDir is the node's /var/log (pod logs under pods/).
	LogDir string
	// Quirks says which of this machine's peculiarities the node
	// configuration had to allow for.
	Quirks []string

	cp         *ControlPlane
	dir        string
	ns         *nodeNS
	cg         *nodeCgroups
	containerd *process
	kubelet    *process
	pluginArgs []string
	// basePluginArgs are the node's own flags, kept while
	// RestartPluginWith runs the plugin with more.
	basePluginArgs []string

	mu       sync.Mutex
	plugin   *process
	stopOnce sync.Once
	stopErr  error
}

// RealNodeSupport returns nil when this machine can run a real node, or
// what it lacks.
func RealNodeSupport() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("a real node (kubelet, containerd, runc) needs Linux; this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (containerd, runc, mounts, cgroups); run the end-to-end tests as root: sudo make e2e")
	}
	hierarchies, _, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("a real node needs cgroups: %w", err)
	}
	probe := filepath.Join(hierarchies[0], fmt.Sprintf("gpufrac-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fmt.Errorf("a real node needs writable cgroups (in a container, run privileged with the host's cgroups): %w", err)
	}
	_ = os.Remove(probe)
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("a real node's pod network (CNI tap plugin) needs /dev/net/tun: %w", err)
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		return errors.New("the real node's image copies a shell from the host and needs ldd to find its libraries")
	}
	return nil
}

// AddRealNode builds what is missing (hack/nodebuild), starts containerd,
// imports the node image, starts the kubelet and waits for its Node to be
// Ready, then starts the plugin and waits for its ResourceSlices. When the
// machine cannot run a real node it returns a *nodebuild.UnavailableError.
func (cp *ControlPlane) AddRealNode(ctx context.Context, opts RealNodeOptions) (_ *RealNode, finalErr error) {
	if err := RealNodeSupport(); err != nil {
		return nil, &nodebuild.UnavailableError{Reason: err.Error()}
	}
	if opts.ChartPlugin && cp.PodNetwork == nil {
		return nil, errors.New("a real node for a chart's plugin needs a control plane started with Options.Workloads")
	}
	bins, err := nodebuild.Ensure(ctx, nodebuild.Options{Progress: cp.opts.Progress, Version: cp.KubeVersion})
	if err != nil {
		return nil, err
	}
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cp.Dir, "nodes", opts.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	image, err := cp.nodeImage(ctx, root)
	if err != nil {
		return nil, err
	}
	end := cp.progress.Step(fmt.Sprintf("Starting real node %s (%s): containerd %s, runc %s, kubelet %s, gpufrac-kubelet-plugin",
		opts.Name, opts.GPUs, nodebuild.ContainerdVersion, nodebuild.RuncVersion, cp.KubeVersion))
	defer func() { end(finalErr) }()

	sweepStaleCgroups(klog.FromContext(ctx))
	n := &RealNode{
		Name: opts.Name, cp: cp, dir: dir,
		CDIRoot:       filepath.Join(dir, "cdi"),
		PluginDataDir: filepath.Join(cp.runDir, "n", opts.Name, "plugin"),
		LogDir:        filepath.Join(dir, "var-log"),
	}
	if opts.ChartPlugin {
		n.PluginDataDir = ChartPluginDataDir
	}
	n.LimitRecord = filepath.Join(n.PluginDataDir, gpusim.RecordFile)
	for _, d := range []string{n.CDIRoot, filepath.Join(dir, "cni", "net.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if n.cg, err = newNodeCgroups(fmt.Sprintf("%s%d-%s", cgroupPrefix, os.Getpid(), opts.Name)); err != nil {
		return nil, err
	}
	if n.ns, err = newNodeNS(dir); err != nil {
		_ = n.cg.remove()
		return nil, err
	}
	cp.mu.Lock()
	cp.realNodes = append(cp.realNodes, n)
	cp.mu.Unlock()
	defer func() {
		if finalErr != nil {
			tails := n.logTails(40)
			_ = n.Stop()
			finalErr = fmt.Errorf("%w\n%s", finalErr, tails)
		}
	}()

	q := detectQuirks(n.cg.v2)
	if q.cgroupV1 {
		n.Quirks = append(n.Quirks, "cgroup v1: kubelet failCgroupV1=false")
	}
	if q.noSysResource {
		n.Quirks = append(n.Quirks, "no CAP_SYS_RESOURCE: containerd restrict_oom_score_adj=true")
	}
	if q.snapshotter != "overlayfs" {
		n.Quirks = append(n.Quirks, "no overlay file system: containerd's native snapshotter")
	}
	if err := n.startContainerd(ctx, bins, q, image); err != nil {
		return nil, err
	}
	if !opts.ChartPlugin {
		if err := os.MkdirAll(n.PluginDataDir, 0o755); err != nil {
			return nil, err
		}
	}
	if err := n.startKubelet(ctx, bins, q, opts.Labels); err != nil {
		return nil, err
	}
	// The node's driver root (the plugin's default for simulated GPUs, the chart's
	// plugin included)
	// holds the MPS double at usr/bin/nvidia-cuda-mps-control, static, and
	// the script's shell: the daemon Pods chroot into it.
	if err := n.InstallMPSDouble(ctx, filepath.Join(n.PluginDataDir, "simulated-driver-root")); err != nil {
		return nil, err
	}
	if opts.StubDriver {
		if _, err := n.InstallStubDriver(ctx, filepath.Join(n.PluginDataDir, "simulated-driver-root")); err != nil {
			return nil, err
		}
	}
	if opts.ChartPlugin {
		return n, nil
	}
	n.pluginArgs = []string{
		"--node-name=" + opts.Name, "--simulate-gpus=" + opts.GPUs,
		"--kubeconfig=" + cp.Kubeconfig,
		"--plugin-data-dir=" + n.PluginDataDir, "--registrar-dir=" + kubeletRegistry,
		"--cdi-root=" + n.CDIRoot, "--metrics-address=", "-v=4",
		"--mps-daemon-image=" + NodeImage, "--namespace=" + MPSNamespace,
	}
	if hook := filepath.Join(filepath.Dir(cp.PluginBinary), "gpufrac-cdi-hook"); fileExists(hook) {
		n.pluginArgs = append(n.pluginArgs, "--cdi-hook-path="+hook)
	}
	if opts.Enforcement != "" {
		n.pluginArgs = append(n.pluginArgs, "--simulate-enforcement="+opts.Enforcement)
	}
	n.pluginArgs = append(n.pluginArgs, opts.PluginArgs...)
	if err := cp.ensureNamespace(ctx, MPSNamespace); err != nil {
		return nil, err
	}
	if err := n.startPlugin(); err != nil {
		return nil, err
	}
	return n, n.waitForSlices(ctx)
}

// nodeImage builds NodeImage's archive once for all the real nodes of the
// control plane.
func (cp *ControlPlane) nodeImage(ctx context.Context, root string) (string, error) {
	cp.imageMu.Lock()
	defer cp.imageMu.Unlock()
	if cp.imageArchive != "" {
		return cp.imageArchive, nil
	}
	dir := filepath.Join(cp.Dir, "node-image")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	archive, err := buildNodeImage(ctx, cp.progress, root, dir)
	if err != nil {
		return "", err
	}
	cp.imageArchive = archive
	return archive, nil
}

// start runs a node process inside the namespace and the node's cgroup.
func (n *RealNode) start(name, bin string, args, env []string) (*process, error) {
	proc, err := startProcessVia(n.ns.start, name, n.dir, bin, args, env)
	if err != nil {
		return nil, err
	}
	if err := n.cg.adopt(proc.cmd.Process.Pid); err != nil {
		_ = proc.stop(stopGrace)
		return nil, err
	}
	return proc, nil
}

func (n *RealNode) startContainerd(ctx context.Context, bins *nodebuild.Binaries, q nodeQuirks, image string) error {
	confDir := filepath.Join(n.dir, "cni", "net.d")
	cni := cniConfig(filepath.Join(n.dir, "cni", "ipam"))
	if n.cp.PodNetwork != nil {
		cni = ptpCNIConfig(n.cp.PodNetwork, filepath.Join(n.dir, "cni", "ipam"))
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-gpufrac-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	config := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(containerdConfig(bins.Dir, bins.Paths[nodebuild.Runc], n.CDIRoot, confDir, q)), 0o644); err != nil {
		return err
	}
	// containerd finds its shim on PATH.
	env := []string{"PATH=" + bins.Dir + ":" + os.Getenv("PATH")}
	var err error
	if n.containerd, err = n.start("containerd", bins.Paths[nodebuild.Containerd], []string{"--config=" + config, "--log-level=info"}, env); err != nil {
		return err
	}
	err = poll(ctx, time.Minute, n.containerd, "containerd's socket", func() (bool, error) {
		var ok bool
		_ = n.ns.do(func() error { _, err := os.Stat(containerdSocket); ok = err == nil; return nil })
		return ok, nil
	})
	if err != nil {
		return err
	}
	return n.run(ctx, "ctr-import", bins.Paths[nodebuild.Ctr], "--address="+containerdSocket, "--namespace=k8s.io",
		"images", "import", "--local", "--snapshotter="+q.snapshotter, image)
}

// run runs a short command inside the namespace and waits for it.
func (n *RealNode) run(ctx context.Context, name, bin string, args ...string) error {
	proc, err := startProcessVia(n.ns.start, name, n.dir, bin, args, nil)
	if err != nil {
		return err
	}
	select {
	case <-proc.done:
	case <-ctx.Done():
		_ = proc.stop(time.Second)
		return ctx.Err()
	case <-time.After(2 * time.Minute):
		_ = proc.stop(time.Second)
		return fmt.Errorf("%s did not finish within 2 minutes", name)
	}
	if proc.waitErr != nil {
		return fmt.Errorf("%s: %w: %s", name, proc.waitErr, proc.tail(20))
	}
	return nil
}

func (n *RealNode) startKubelet(ctx context.Context, bins *nodebuild.Binaries, q nodeQuirks, extraLabels map[string]string) error {
	cp := n.cp
	if err := cp.bindNodeRole(ctx); err != nil {
		return err
	}
	kubeconfig, err := cp.pki.kubeconfig("kubelet-"+n.Name, cp.server, "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	config := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(kubeletConfig(n.cg.Root, cp.pki.CAFile, ports[0], ports[1], q)), 0o644); err != nil {
		return err
	}
	n.kubelet, err = n.start("kubelet", bins.Paths[nodebuild.Kubelet], []string{
		"--config=" + config, "--kubeconfig=" + kubeconfig, "--root-dir=" + kubeletRootDir,
		"--hostname-override=" + n.Name,
		"--node-labels=" + nodeLabels(extraLabels), "--v=2",
	}, nil)
	if err != nil {
		return err
	}
	nodes := cp.Client.CoreV1().Nodes()
	err = poll(ctx, 2*time.Minute, n.kubelet, "Node "+n.Name+" Ready", func() (bool, error) {
		node, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	// The node lifecycle controller, which lifts the not-ready taint the
	// API server puts on new Nodes, is not among the harness's controllers.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		notReady := func(t v1.Taint) bool { return t.Key == v1.TaintNodeNotReady }
		if !slices.ContainsFunc(node.Spec.Taints, notReady) {
			return nil
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, notReady)
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// bindNodeRole lets kubelets (group system:nodes) do what the system:node
// role allows; the harness's API server authorizes with RBAC alone.
func (cp *ControlPlane) bindNodeRole(ctx context.Context) error {
	_, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-harness-nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding system:node to the kubelets: %w", err)
	}
	return nil
}

func (n *RealNode) startPlugin() error {
	proc, err := n.start("gpufrac-kubelet-plugin", n.cp.PluginBinary, n.pluginArgs, nil)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.plugin = proc
	n.mu.Unlock()
	return nil
}

func (n *RealNode) currentPlugin() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.plugin
}

// waitForSlices waits for the plugin's ResourceSlices and its registration
// socket in the kubelet's plugin registry.
func (n *RealNode) waitForSlices(ctx context.Context) error {
	plugin := n.currentPlugin()
	return poll(ctx, time.Minute, plugin, "the plugin's ResourceSlices and registration", func() (bool, error) {
		var registered bool
		_ = n.ns.do(func() error {
			entries, _ := os.ReadDir(kubeletRegistry)
			registered = slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "gpufrac.dev") })
			return nil
		})
		if !registered {
			return false, nil
		}
		list, err := n.cp.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		return err == nil && len(list.Items) > 0, nil
	})
}

// RestartPlugin stops the plugin (SIGTERM, as a rolling update or a crash
// loop would) and starts it again with the same flags, and waits until it is
// registered again.
func (n *RealNode) RestartPlugin(ctx context.Context) error {
	if err := n.currentPlugin().stop(stopGrace); err != nil {
		return err
	}
	if err := n.startPlugin(); err != nil {
		return err
	}
	return n.waitForSlices(ctx)
}

// Stop stops the kubelet, SIGKILLs the pods' processes (by the PIDs their
// cgroups list), stops the plugin and containerd, SIGKILLs what is left of
// the node (containerd's shims), removes the cgroups the node made and ends
// its mount namespace. Safe to call twice.
func (n *RealNode) Stop() error {
	n.stopOnce.Do(func() {
		var errs []error
		for _, proc := range []*process{n.kubelet} {
			if proc != nil {
				n.cp.recordPeak(proc)
				errs = append(errs, proc.stop(stopGrace))
			}
		}
		errs = append(errs, n.cg.kill(n.cg.Root, 10*time.Second))
		for _, proc := range []*process{n.currentPlugin(), n.containerd} {
			if proc != nil {
				n.cp.recordPeak(proc)
				errs = append(errs, proc.stop(stopGrace))
			}
		}
		errs = append(errs, n.cg.kill(n.cg.Node, 10*time.Second))
		errs = append(errs, n.cg.remove())
		n.ns.close()
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}

// poll checks cond every 100 ms until it holds, proc exits or timeout.
func poll(ctx context.Context, timeout time.Duration, proc *process, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if gone, err := proc.exited(); gone {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: not within %s", what, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodeLabels is the kubelet's --node-labels value.
func nodeLabels(extra map[string]string) string {
	labels := []string{"gpufrac.dev/real-node=true"}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		labels = append(labels, k+"="+extra[k])
	}
	return strings.Join(labels, ",")
}
