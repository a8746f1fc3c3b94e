// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command demo is `make demo`: it starts a real local control plane
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2) with
// two simulated nodes of 8 x H200, each running gpufrac-kubelet-plugin and
// either a real kubelet with containerd and runc (as root on Linux with
// writable cgroups: hack/harness's real node) or a kubelet stand-in
// (elsewhere; it says which and why), applies the manifests in demo/ with
// kubectl, waits until the pods are Running, shows what each GPU holds
// (`kubectl gpufrac status`, and its memory map), the plugin's metrics for one pod and what its
// claim says about itself, and stops everything it started. State (logs, CDI specs, the
// stand-ins' records, the objects as YAML) stays under the printed folder.
//
// It exits non-zero, with each pod's reason, when a pod does not reach
// Running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// mpsImage is what the plugins put in their MPS daemon Pods. Nothing pulls
// it: the kubelet stand-ins run no containers.
const mpsImage = "gpufrac/mps-control-daemon:demo"

type options struct {
	state   string
	nodes   int
	gpus    string
	timeout time.Duration
	wait    bool
	helm    bool
	smGPUs  string
	node    string
	// real is decided at start: real nodes or kubelet stand-ins.
	real bool
}

func main() {
	var o options
	flag.StringVar(&o.state, "state", "demo/state", "folder for the demo's state (replaced on each run)")
	flag.IntVar(&o.nodes, "nodes", 2, "number of simulated nodes")
	flag.StringVar(&o.gpus, "gpus", "h200x8", "simulated GPUs per node (--simulate-gpus)")
	flag.StringVar(&o.smGPUs, "sm-sharing-gpus", "6,7", "GPUs of each node reserved for SMSharing (the plugin's --sm-sharing-gpus); the rest serve TimeSlicing")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long pods may take to reach Running")
	flag.StringVar(&o.node, "node", nodeAuto, "real: kubelet, containerd and runc run the pods (root, Linux, writable cgroups); standin: kubelet stand-ins; auto: real where possible")
	flag.BoolVar(&o.helm, "helm", false, "install the Helm chart with the Helm SDK on one real node (root): the image built without Docker, the plugin as the chart's DaemonSet, the controller as its Deployment")
	flag.BoolVar(&o.wait, "wait", false, "keep the cluster running after the report until Ctrl-C, to explore it with kubectl")
	flag.Parse()
	os.Exit(run(o))
}

func step(format string, args ...any) { fmt.Printf("\n\033[1m==> "+format+"\033[0m\n", args...) }

func run(o options) int {
	start := time.Now()
	if o.helm {
		o.node, o.nodes = nodeReal, 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	root, err := kubebuild.RepoRoot()
	if err != nil {
		return fail(err)
	}
	state := o.state
	if !filepath.IsAbs(state) {
		state = filepath.Join(root, state)
	}
	cluster := filepath.Join(state, "cluster")
	if err := os.RemoveAll(cluster); err != nil {
		return fail(fmt.Errorf("removing the previous run's state: %w", err))
	}
	if err := os.MkdirAll(cluster, 0o755); err != nil {
		return fail(err)
	}
	// Component logs go to files; the demo's own log (client-go, stand-ins)
	// too, so the terminal shows the story, not the chatter.
	logFile, err := os.Create(filepath.Join(cluster, "demo.log"))
	if err != nil {
		return fail(err)
	}
	defer func() { _ = logFile.Close() }()
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(2)))
	klog.SetLogger(logger)
	ctx = klog.NewContext(ctx, logger)

	fmt.Printf("gpufrac demo: a local Kubernetes %s control plane, %d simulated nodes of %s (GPUs %s reserved for SMSharing), state in %s\n",
		kubebuild.KubeVersion, o.nodes, o.gpus, o.smGPUs, cluster)
	bins, err := kubebuild.Ensure(ctx, kubebuild.Options{RepoRoot: root, Progress: os.Stdout, Kubectl: true})
	if err != nil {
		return fail(err)
	}
	useReal, why, err := chooseNodes(ctx, o.node)
	if err != nil {
		return fail(fmt.Errorf("-node=real: %w", err))
	}
	o.real = useReal
	if useReal {
		fmt.Printf("gpufrac demo: real nodes (upstream kubelet, containerd, runc run the pods; %s)\n", why)
	} else {
		fmt.Printf("gpufrac demo: kubelet stand-ins, no container runs (%s)\n", why)
	}
	plugin := filepath.Join(root, "bin", "gpufrac-kubelet-plugin") // from make build
	if _, err := os.Stat(plugin); err != nil {
		plugin = "" // the harness builds it
	}

	cp, err := harness.Start(ctx, harness.Options{Dir: cluster, KeepDir: true, Progress: os.Stdout, Binaries: bins, PluginBinary: plugin, Workloads: o.helm})
	if err != nil {
		return fail(err)
	}
	var code int
	if o.helm {
		code = helmDemo(ctx, o, cp, bins[kubebuild.Kubectl])
	} else {
		code = demo(ctx, o, root, cluster, cp, bins[kubebuild.Kubectl])
	}

	step("Stopping every process the demo started")
	peaks := cp.PeakRSS()
	if err := cp.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "demo: stopping:", err)
		code = max(code, 1)
	}
	fmt.Printf("    peak memory: control plane %d MiB (etcd %d, kube-apiserver %d, kube-scheduler %d, kube-controller-manager %d), each plugin %d MiB\n",
		cp.ControlPlanePeakRSS()>>20, peaks["etcd"]>>20, peaks["kube-apiserver"]>>20, peaks["kube-scheduler"]>>20,
		peaks["kube-controller-manager"]>>20, peaks["gpufrac-kubelet-plugin"]>>20)
	fmt.Printf("    state kept in %s (logs, CDI specs, the stand-ins' records, objects as YAML)\n", cluster)
	if code == 0 {
		fmt.Printf("\ngpufrac demo finished in %s\n", time.Since(start).Round(time.Second))
	}
	return code
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
	return 1
}

// demo runs the part between start and stop; the caller always stops.
func demo(ctx context.Context, o options, root, cluster string, cp *harness.ControlPlane, kubectlBin string) int {
	var nodes []*harness.Node
	var realNodes []*harness.RealNode
	metricsAddr := map[string]string{}
	for i := range o.nodes {
		name := fmt.Sprintf("demo-node-%d", i+1)
		addr, err := freeLocalAddress()
		if err != nil {
			return fail(err)
		}
		metricsAddr[name] = addr
		// The second node runs without MPS daemons, as a platform team may
		// choose: its slice says mpsVersion none, and it takes strict
		// partitions only (demo/claim-templates.yaml, two-gpus).
		noMPS := i == 1
		if o.real {
			args := []string{"--sm-sharing-gpus=" + o.smGPUs, "--metrics-address=" + addr}
			if noMPS {
				args = append(args, "--mps-daemon-image=")
			}
			// The stub driver in its driver root: every claim's CDI spec
			// carries the driver's files (TestCDISpecNeedsNoNvidiaRuntime).
			n, err := cp.AddRealNode(ctx, harness.RealNodeOptions{Name: name, GPUs: o.gpus, PluginArgs: args, StubDriver: true})
			if err != nil {
				return fail(err)
			}
			realNodes = append(realNodes, n)
			continue
		}
		image := mpsImage
		if noMPS {
			image = ""
		}
		n, err := cp.AddNode(ctx, harness.NodeOptions{
			Name: name, GPUs: o.gpus, MPSImage: image, NoMPS: noMPS,
			// A GPU serves one compute mode at a time; reserving some for
			// SMSharing lets the shipped DeviceClasses keep modes apart.
			PluginArgs: []string{"--sm-sharing-gpus=" + o.smGPUs, "--metrics-address=" + addr},
		})
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, n)
	}
	controllerMetrics, err := freeLocalAddress()
	if err != nil {
		return fail(err)
	}
	watch := startDashboardWatch(ctx, cluster, metricsAddr, controllerMetrics)
	defer watch.stop()
	kubectl := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd
	}

	if err := waitDefaultServiceAccount(ctx, cp); err != nil {
		return fail(err)
	}
	step("Starting gpufrac-controller's admission webhook: KAI annotations and HAMi resources become claims")
	// Its metrics too: the dashboard's fragmentation and ignored-size
	// panels are the controller's.
	webhook, err := cp.StartHAMiWebhookWithMetrics(ctx, "default", kai.Options{}, controllerMetrics)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = webhook.Stop() }()

	step("Applying the demo manifests with kubectl apply")
	demoDir := filepath.Join(root, "demo")
	pods := []string{"-f", filepath.Join(demoDir, "pods.yaml"), "-f", filepath.Join(demoDir, "kai-pods.yaml"), "-f", filepath.Join(demoDir, "hami-pods.yaml")}
	if o.real {
		// No registry: the pods run the probe of the node's own image.
		file, err := realNodePods(cluster, filepath.Join(demoDir, "pods.yaml"), filepath.Join(demoDir, "kai-pods.yaml"), filepath.Join(demoDir, "hami-pods.yaml"))
		if err != nil {
			return fail(err)
		}
		fmt.Printf("    (on real nodes every container runs %s /probe, which prints what it sees: %s)\n", harness.NodeImage, file)
		pods = []string{"-f", file}
	}
	apply := kubectl(append([]string{"apply", "--namespace=default",
		"-f", filepath.Join(root, "deployments", "deviceclasses.yaml"), "-f", filepath.Join(demoDir, "claim-template-40g.yaml"),
		"-f", filepath.Join(demoDir, "claim-templates.yaml")}, pods...)...)
	if err := apply.Run(); err != nil {
		return fail(fmt.Errorf("kubectl apply: %w", err))
	}

	if o.real {
		step("Waiting until the pods are Running (scheduler allocates, the kubelet prepares through the plugin, containerd applies the CDI spec, runc runs the hook)")
	} else {
		step("Waiting until the pods are Running (scheduler allocates, the stand-in prepares through the plugin)")
	}
	r := &reporter{ctx: ctx, client: cp.Client, nodes: nodes, realNodes: realNodes, namespace: "default"}
	notRunning, waitErr := r.waitRunning(o.timeout)
	dumpObjects(cluster, kubectl)
	if ctx.Err() != nil {
		return fail(context.Cause(ctx))
	}
	if waitErr == nil && len(notRunning) > 0 {
		waitErr = fmt.Errorf("%d pod(s) did not reach Running", len(notRunning))
	}

	// Show what did work even when a pod failed, then the reasons last.
	if err := r.waitPrepared(); err != nil {
		return fail(err)
	}
	if err := applyMonitor(o.real, cluster, demoDir, kubectl); err != nil {
		return fail(err)
	}
	step("kubectl gpufrac status: what each GPU holds")
	status := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl-gpufrac"), "status", "--kubeconfig="+cp.Kubeconfig)
	status.Stdout, status.Stderr = os.Stdout, os.Stderr
	if err := status.Run(); err != nil {
		return fail(fmt.Errorf("kubectl gpufrac status (bin/ comes from make build): %w", err))
	}
	step("kubectl gpufrac status -o map: each GPU's memory as one line")
	mapArgs := []string{"status", "-o", "map", "--kubeconfig=" + cp.Kubeconfig}
	if watch.srv != nil {
		// The demo's own Prometheus scrapes the plugins: the map draws
		// what each claim uses.
		mapArgs = append(mapArgs, "--prometheus-url="+watch.srv.URL)
	}
	memMap := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl-gpufrac"), mapArgs...)
	memMap.Stdout, memMap.Stderr = os.Stdout, os.Stderr
	if err := memMap.Run(); err != nil {
		return fail(fmt.Errorf("kubectl gpufrac status -o map: %w", err))
	}
	if o.real {
		step("What each container saw inside (containerd applied the CDI specs; gpufrac-cdi-hook set the limits on its cgroup)")
		r.realContainers(os.Stdout)
	} else {
		step("What each container got (CDI edits the stand-in applied with the CDI library, as containerd does)")
		r.containers(os.Stdout)
	}

	if claim, err := r.claimName("llm", "gpu"); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
	} else {
		step("The plugin's metrics for pod llm's fraction")
		if err := r.fractionMetrics(os.Stdout, "llm", claim, metricsAddr); err != nil {
			return fail(err)
		}
		step("kubectl describe resourceclaim %s", claim)
		if err := kubectl("describe", "resourceclaim", "--namespace=default", claim).Run(); err != nil {
			return fail(fmt.Errorf("kubectl describe: %w", err))
		}
	}

	if err := explainTooLarge(ctx, cp.Client, root, cp.Kubeconfig, kubectl); err != nil {
		return fail(err)
	}
	if err := r.showBorrowing(ctx, metricsAddr); err != nil {
		return fail(err)
	}
	if err := r.showEviction(ctx, metricsAddr); err != nil {
		return fail(err)
	}

	if waitErr == nil {
		if err := migDemo(ctx, o, cp, root); err != nil {
			return fail(err)
		}
		step("Two more kinds of node: an older driver (no per-cgroup limits) and a GPU Operator driver root")
		if err := nodeKinds(ctx, o, cp, cluster, os.Stdout); err != nil {
			return fail(err)
		}
	}
	if err := watch.writeTable(ctx, root, filepath.Dir(cluster)); err != nil {
		return fail(fmt.Errorf("the dashboard's panel table: %w", err))
	}
	if waitErr != nil {
		step("Not every pod reached Running")
		for _, line := range notRunning {
			fmt.Fprintln(os.Stderr, "  "+line)
		}
		return fail(fmt.Errorf("%w; component logs under %s", waitErr, cluster))
	}
	if o.wait {
		step("The cluster keeps running; press Ctrl-C to stop it")
		fmt.Printf("    export KUBECONFIG=%s\n    %s get pods,resourceclaims -o wide\n", cp.Kubeconfig, kubectlBin)
		<-ctx.Done()
	}
	return 0
}

func waitDefaultServiceAccount(ctx context.Context, cp *harness.ControlPlane) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount (kube-controller-manager): %w", err)
	}
	return nil
}

// dumpObjects keeps the demo's objects as YAML next to the logs.
func dumpObjects(cluster string, kubectl func(args ...string) *exec.Cmd) {
	for _, kind := range []string{"pods", "resourceclaims", "resourceslices", "deviceclasses", "events"} {
		f, err := os.Create(filepath.Join(cluster, kind+".yaml"))
		if err != nil {
			continue
		}
		cmd := kubectl("get", kind, "--all-namespaces", "-o", "yaml")
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil && !errors.Is(err, context.Canceled) {
			_, _ = fmt.Fprintf(f, "# kubectl get %s: %v\n", kind, err)
		}
		_ = f.Close()
	}
}
