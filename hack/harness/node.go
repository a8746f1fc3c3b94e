// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/hack/harness/kubeletstandin"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// NodeOptions describe a simulated node.
type NodeOptions struct {
	// Name of the Node object and of the plugin's pool; keep it short (it
	// is part of socket paths, which are limited to 108 bytes).
	Name string
	// GPUs are the simulated GPUs, as --simulate-gpus takes them
	// ("h200x8", "h100x1,h200x1").
	GPUs string
	// Enforcement is --simulate-enforcement (dmem, mps, none); empty keeps
	// the plugin's default.
	Enforcement string
	// Labels are added to the Node (kubernetes.io/hostname is always set).
	Labels map[string]string
	// MPSImage is the plugin's --mps-daemon-image (its own image, in
	// production): the image the MPS control daemon Pods it starts, in
	// namespace MPSNamespace, name; empty means DefaultMPSImage unless
	// NoMPS is set (on nodes with per-cgroup limits every fraction is an
	// MPS client, as in production). The node's simulated driver root gets
	// the MPS double at usr/bin/nvidia-cuda-mps-control (static) and the
	// script's shell; the stand-in runs those Pods' containers on the host
	// through the real gpufrac-mps-launcher, which chroots into that driver
	// root, so the template's whole lifecycle runs the production path; no
	// MPS server runs without a GPU.
	MPSImage string
	// NoMPS runs the plugin without MPS daemons: a node where MPS is off
	// (SMSharing refused, no borrowing above the request).
	NoMPS bool
	// PluginArgs are extra flags for gpufrac-kubelet-plugin.
	PluginArgs []string
	// PluginBinary replaces the control plane's plugin binary for this
	// node (a build with test-only tags).
	PluginBinary string
	// NoStandIn leaves the plugin without a kubelet stand-in: the caller
	// drives its DRA socket itself (kubeletstandin.Dial).
	NoStandIn bool
	// MaxPods is the Node's pod capacity; default 110, as the kubelet's.
	MaxPods int
}

// MPSNamespace is where the plugins of simulated nodes run MPS daemon Pods.
const MPSNamespace = "gpufrac-system"

// DefaultMPSImage is the image simulated nodes' daemon Pods name (the
// plugin's own, in production); the stand-in runs their containers with
// the gpufrac-mps-launcher it built, whatever the image says.
const DefaultMPSImage = "gpufrac/mps-control-daemon:integration"

// Node is a simulated node: a Ready Node object, gpufrac-kubelet-plugin
// running against simulated GPUs, and a kubelet stand-in driving it.
type Node struct {
	Name string
	// CDIRoot is the plugin's --cdi-root: the CDI specs of prepared claims.
	CDIRoot string
	// RecordDir holds the stand-in's JSON record of each Running pod.
	RecordDir string
	// PluginDataDir and RegistrarDir are the plugin's sockets' directories.
	PluginDataDir, RegistrarDir string
	// StandIn is the node's kubelet stand-in.
	StandIn *kubeletstandin.StandIn

	cp         *ControlPlane
	plugin     *process // guarded by cp.mu: RestartPlugin replaces it
	pluginBin  string
	pluginArgs []string // without NodeOptions.PluginArgs
	stateDir   string
	stopOnce   sync.Once
	stopErr    error
}

// AddNode registers a Node, starts the kubelet plugin for it and the
// kubelet stand-in, and returns once the plugin's ResourceSlices are
// published and the stand-in registered the plugin.
func (cp *ControlPlane) AddNode(ctx context.Context, opts NodeOptions) (_ *Node, finalErr error) {
	if opts.Name == "" || opts.GPUs == "" {
		return nil, errors.New("a simulated node needs a name and GPUs")
	}
	logger := klog.FromContext(ctx).WithValues("node", opts.Name)
	ctx = klog.NewContext(ctx, logger)
	parts := "Node object, gpufrac-kubelet-plugin, kubelet stand-in"
	if opts.NoStandIn {
		parts = "Node object, gpufrac-kubelet-plugin"
	}
	end := cp.progress.Step(fmt.Sprintf("Starting simulated node %s (%s): %s", opts.Name, opts.GPUs, parts))
	defer func() { end(finalErr) }()

	stateDir := filepath.Join(cp.Dir, "nodes", opts.Name)
	sockDir := filepath.Join(cp.runDir, "n", opts.Name)
	n := &Node{
		Name:          opts.Name,
		CDIRoot:       filepath.Join(stateDir, "cdi"),
		RecordDir:     filepath.Join(stateDir, "pods"),
		PluginDataDir: filepath.Join(sockDir, "plugin"),
		RegistrarDir:  filepath.Join(sockDir, "registry"),
		cp:            cp,
		pluginBin:     cp.PluginBinary,
		stateDir:      stateDir,
	}
	if opts.PluginBinary != "" {
		n.pluginBin = opts.PluginBinary
	}
	for _, dir := range []string{n.CDIRoot, n.RecordDir, n.PluginDataDir, n.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	if err := cp.createNode(ctx, opts); err != nil {
		return nil, err
	}

	args := []string{
		"--node-name=" + opts.Name, "--simulate-gpus=" + opts.GPUs,
		"--kubeconfig=" + cp.Kubeconfig,
		"--plugin-data-dir=" + n.PluginDataDir, "--registrar-dir=" + n.RegistrarDir,
		"--cdi-root=" + n.CDIRoot, "--metrics-address=", "-v=4",
	}
	// CDI specs name the hook by host path: the one built with the plugin.
	if hook := filepath.Join(filepath.Dir(cp.PluginBinary), "gpufrac-cdi-hook"); fileExists(hook) {
		args = append(args, "--cdi-hook-path="+hook)
	}
	mpsTools := ""
	if opts.MPSImage == "" && !opts.NoMPS {
		opts.MPSImage = DefaultMPSImage
	}
	if opts.MPSImage != "" {
		if err := cp.ensureNamespace(ctx, MPSNamespace); err != nil {
			return nil, err
		}
		var err error
		if mpsTools, err = cp.mpsDouble(ctx); err != nil {
			return nil, err
		}
		// The plugin's default driver root for simulated GPUs, where it
		// installs the simulated NVML library too.
		if err := kubebuild.InstallDriverRoot(mpsTools, filepath.Join(n.PluginDataDir, "simulated-driver-root")); err != nil {
			return nil, fmt.Errorf("installing the MPS double into the node's driver root: %w", err)
		}
		args = append(args, "--mps-daemon-image="+opts.MPSImage, "--namespace="+MPSNamespace)
	}
	if opts.Enforcement != "" {
		args = append(args, "--simulate-enforcement="+opts.Enforcement)
	}
	n.pluginArgs = slices.Clone(args)
	args = append(args, opts.PluginArgs...)
	plugin, err := startProcess("gpufrac-kubelet-plugin", stateDir, n.pluginBin, args, nil)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	n.plugin = plugin
	cp.nodes = append(cp.nodes, n)
	cp.mu.Unlock()
	defer func() {
		if finalErr != nil {
			_ = n.Stop()
			finalErr = fmt.Errorf("%w\n----- last lines of %s -----\n%s", finalErr, plugin.logPath, plugin.tail(40))
		}
	}()

	if err := n.waitForSlices(ctx); err != nil {
		return nil, err
	}
	if opts.NoStandIn {
		return n, nil
	}
	standinCfg := rest.CopyConfig(cp.RestConfig)
	standinCfg.UserAgent = "kubelet-standin/" + opts.Name
	client, err := kubernetes.NewForConfig(standinCfg)
	if err != nil {
		return nil, fmt.Errorf("creating the stand-in's client: %w", err)
	}
	// The stand-in lives until Stop, not until ctx (often one test step).
	standinCtx := klog.NewContext(context.WithoutCancel(ctx), logger)
	n.StandIn, err = kubeletstandin.Start(standinCtx, kubeletstandin.Config{
		NodeName: opts.Name, Client: client,
		RegistrarDir: n.RegistrarDir, CDIRoot: n.CDIRoot, RecordDir: n.RecordDir,
		MPSToolsDir: mpsTools,
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// createNode registers a Node object as a kubelet would: Ready, with
// capacity, and without the not-ready taint the API server adds to new nodes.
func (cp *ControlPlane) createNode(ctx context.Context, opts NodeOptions) error {
	labels := map[string]string{
		"kubernetes.io/hostname": opts.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"gpufrac.dev/simulated": "true",
	}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	nodes := cp.Client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", opts.Name, err)
	}
	maxPods := int64(110)
	if opts.MaxPods > 0 {
		maxPods = int64(opts.MaxPods)
	}
	resources := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	now := metav1.Now()
	node.Status = v1.NodeStatus{
		Capacity: resources, Allocatable: resources,
		Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet stand-in is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: opts.Name}},
		NodeInfo: v1.NodeSystemInfo{
			KubeletVersion: cp.KubeVersion, OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "kubelet-standin://cdi",
		},
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking Node %s Ready: %w", opts.Name, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, opts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tainted := slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == v1.TaintNodeNotReady })
		if !tainted {
			return nil
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == v1.TaintNodeNotReady })
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// ensureNamespace creates a namespace if it is missing and waits for its
// default ServiceAccount, without which no Pod is admitted there.
func (cp *ControlPlane) ensureNamespace(ctx context.Context, name string) error {
	_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount of namespace %s: %w", name, err)
	}
	return nil
}

// waitForSlices waits until the plugin published its node's ResourceSlices.
func (n *Node) waitForSlices(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	plugin := n.currentPlugin()
	for {
		if gone, err := plugin.exited(); gone {
			return fmt.Errorf("waiting for the ResourceSlices of node %s: %w", n.Name, err)
		}
		slices, err := n.cp.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err == nil && len(slices.Items) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: no ResourceSlices published within a minute (last error: %v)", n.Name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PluginLog is the path of the node's plugin log.
func (n *Node) PluginLog() string { return n.currentPlugin().logPath }

// Stop stops the stand-in and then the plugin (by its PID). The Node object
// and its slices stay, as with a stopped kubelet. Safe to call twice.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		if n.StandIn != nil {
			n.StandIn.Stop()
		}
		if plugin := n.currentPlugin(); plugin != nil {
			n.cp.recordPeak(plugin)
			n.stopErr = plugin.stop(stopGrace)
		}
	})
	return n.stopErr
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mpsDouble builds the MPS test double and gpufrac-mps-launcher once per
// control plane (kubebuild.BuildMPSDouble); the stand-ins run the plugins'
// MPS daemon Pods with them.
func (cp *ControlPlane) mpsDouble(ctx context.Context) (string, error) {
	cp.mpsOnce.Do(func() {
		root, err := kubebuild.RepoRoot()
		if err != nil {
			cp.mpsErr = err
			return
		}
		dir := filepath.Join(cp.Dir, "mps-tools")
		cp.mpsErr = kubebuild.BuildMPSDouble(ctx, cp.progress, root, dir)
		cp.mpsTools = dir
	})
	return cp.mpsTools, cp.mpsErr
}
