// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

type config struct {
	file  string
	trace int
	seed  uint64
	nodes int
	gpus  string
	// packing is on (webhook and node labels), extender or off.
	packing string
	// extenderDown configures the extender and never serves it.
	extenderDown bool
	// optOut annotates every pod gpufrac.dev/packing: "false": with
	// packing on, the controller, its webhook calls and its labels cost
	// what they cost, and no pod is packed.
	optOut bool
	// rounds of off and on with packing compare.
	rounds int
	// against is the mode compare measures against off: on, or webhook.
	against string
	// progress, when set, hears of each phase of a comparison as it ends.
	progress func(*result)
	// churn, when above 0, runs that many churn events after placing the
	// workload (churn.go), rate a second, sampling every sample.
	churn  int
	rate   float64
	sample time.Duration
	qps    int
	settle time.Duration
	// schedulerFlags are extra kube-scheduler flags.
	schedulerFlags []string
	// apiserverFlags are extra kube-apiserver flags (--profiling=true).
	apiserverFlags []string
	// schedulerConfig is a KubeSchedulerConfiguration (YAML) or empty for
	// the scheduler's defaults.
	schedulerConfig []byte
	// schedulerBinary, when set, is the kube-scheduler run in place of
	// the one built from the module proxy (a patched build, to measure
	// what an upstream change would buy); the other binaries are built
	// as usual.
	schedulerBinary string
}

const namespace = "bench"

// bench is a control plane with the nodes, classes and templates of one
// workload, on which phases run one after another.
type bench struct {
	cfg          config
	cp           *harness.ControlPlane
	client       kubernetes.Interface
	wl           *workload
	extenderAddr string
}

// run measures cfg.packing, or with compare both off and on in
// cfg.rounds rounds on the same cluster; close is called whatever it
// returns.
func run(ctx context.Context, cfg config) (_ []*result, finalErr error) {
	b, closeBench, err := setUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { closeBench(finalErr) }()
	if cfg.packing != compare {
		res, err := b.phase(ctx, cfg.packing, 0)
		if err != nil {
			return nil, err
		}
		return []*result{res}, ctx.Err()
	}
	var all []*result
	for round := 1; round <= cfg.rounds; round++ {
		modes := roundModes(round, cfg.against)
		for _, mode := range modes {
			res, err := b.phase(ctx, mode, round)
			if err != nil {
				return all, err
			}
			all = append(all, res)
			if cfg.progress != nil {
				cfg.progress(res)
			}
			if round == cfg.rounds && mode == modes[1] {
				break // the cluster goes with the run
			}
			if err := b.reset(ctx, mode); err != nil {
				return all, err
			}
		}
	}
	return all, ctx.Err()
}

// binaries are the harness's upstream binaries with kube-scheduler
// replaced by scheduler, or nil (the harness finds or builds them) when
// scheduler is empty.
func binaries(ctx context.Context, scheduler string) (kubebuild.Binaries, error) {
	if scheduler == "" {
		return nil, nil
	}
	st, err := os.Stat(scheduler)
	if err != nil {
		return nil, fmt.Errorf("-kube-scheduler: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("-kube-scheduler %s: not an executable file (mode %v)", scheduler, st.Mode())
	}
	bins, err := kubebuild.Ensure(ctx, kubebuild.Options{Progress: os.Stderr})
	if err != nil {
		return nil, err
	}
	bins[kubebuild.KubeScheduler] = scheduler // Ensure's map is the caller's own
	return bins, nil
}

// setUp starts the control plane and creates the nodes, their slices, the
// DeviceClasses, the namespace and the workload's templates.
func setUp(ctx context.Context, cfg config) (_ *bench, closeBench func(error), finalErr error) {
	lift := []string{fmt.Sprintf("--kube-api-qps=%d", cfg.qps), fmt.Sprintf("--kube-api-burst=%d", 2*cfg.qps)}
	schedArgs := append(slices.Clone(lift), cfg.schedulerFlags...)
	var schedConfig []byte
	base := cfg.schedulerConfig
	b := &bench{cfg: cfg}
	if cfg.packing == "extender" {
		// The scheduler starts first and must name the extender, so its
		// address is chosen now and served once the nodes exist.
		var err error
		if b.extenderAddr, err = freeLoopbackAddress(); err != nil {
			return nil, nil, err
		}
		if base, err = withExtender(base, "http://"+b.extenderAddr+"/scheduler"); err != nil {
			return nil, nil, err
		}
	}
	if len(base) > 0 {
		// --config overrides the client flags; the lift goes in the file.
		var err error
		if schedConfig, err = liftSchedulerConfig(base, cfg.qps); err != nil {
			return nil, nil, err
		}
		schedArgs = cfg.schedulerFlags
	}
	bins, err := binaries(ctx, cfg.schedulerBinary)
	if err != nil {
		return nil, nil, err
	}
	cp, err := harness.Start(ctx, harness.Options{
		Progress: os.Stderr, SchedulerArgs: schedArgs, APIServerArgs: cfg.apiserverFlags, SchedulerConfig: schedConfig, ControllerManagerArgs: lift,
		Binaries: bins,
		// The nodes carry slices only; no plugin runs, so none is built.
		PluginBinary: "/nonexistent/gpufrac-kubelet-plugin",
	})
	if err != nil {
		return nil, nil, err
	}
	b.cp = cp
	closeBench = func(err error) {
		if err != nil {
			cp.LogTails(os.Stderr, 30)
		}
		// The figures are measured by now; a slow shutdown is only reported.
		if err := cp.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "realsched: stopping the control plane:", err)
		}
	}
	defer func() {
		if finalErr != nil {
			closeBench(finalErr)
		}
	}()
	restConfig := rest.CopyConfig(cp.RestConfig)
	restConfig.QPS, restConfig.Burst = float32(cfg.qps), 2*cfg.qps
	if b.client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, nil, err
	}

	probe, err := simulate.NodeSlices(ctx, "probe", cfg.gpus, "")
	if err != nil {
		return nil, nil, err
	}
	gpuMemory := probe[0].Spec.Devices[0].Capacity["memory"].Value
	if b.wl, err = loadFor(cfg, gpuMemory); err != nil {
		return nil, nil, err
	}

	names := make([]string, cfg.nodes)
	for i := range names {
		names[i] = simulate.NodeName(i)
	}
	start := time.Now()
	if err := cp.AddSliceNodes(ctx, harness.SliceNodeOptions{Names: names, Workers: 16,
		Slices: func(ctx context.Context, node string) ([]*resourceapi.ResourceSlice, error) {
			return simulate.NodeSlices(ctx, node, cfg.gpus, "")
		}}); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "realsched: %d nodes with slices in %s\n", cfg.nodes, time.Since(start).Round(100*time.Millisecond))
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		return nil, nil, err
	}
	for _, c := range append(classes, b.wl.classes...) {
		if _, err := b.client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, nil, fmt.Errorf("creating DeviceClass %s: %w", c.Name, err)
		}
	}
	if err := createNamespace(ctx, b.client); err != nil {
		return nil, nil, err
	}
	for _, t := range b.wl.templates {
		t = t.DeepCopy()
		t.Namespace = namespace
		if _, err := b.client.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("creating ResourceClaimTemplate %s: %w", t.Name, err)
		}
	}
	return b, closeBench, nil
}

// phase places the workload with packing mode (on, extender or off) and
// measures it; round is 0 outside a comparison. It leaves the pods and
// claims in place; with packing on, gpufrac-controller is stopped and its
// webhook configuration removed.
func (b *bench) phase(ctx context.Context, mode string, round int) (*result, error) {
	cfg := b.cfg
	stop, err := b.startMode(ctx, mode)
	if err != nil {
		return nil, err
	}
	defer stop()

	w := newWatcher(b.client, len(b.wl.pods))
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := w.start(watchCtx); err != nil {
		return nil, err
	}
	pods := b.wl.pods
	optOut := cfg.optOut && mode != "off"
	if optOut {
		// Annotated before the clock starts: the copies are not the
		// scheduler's work.
		pods = make([]*v1.Pod, len(b.wl.pods))
		for i, p := range b.wl.pods {
			pods[i] = p.DeepCopy()
			metav1.SetMetaDataAnnotation(&pods[i].ObjectMeta, podterms.AnnotationPacking, "false")
		}
	}
	counters := b.admissionCounters(ctx)
	cpuBefore, err := b.cp.CPUSeconds()
	if err != nil {
		return nil, err
	}
	// Marks the start of the measured phase for tools that sample the
	// processes' CPU from outside (docs/design/packing.md).
	fmt.Fprintf(os.Stderr, "realsched: placing %d pods\n", len(pods))
	begin := time.Now()
	if err := createPods(ctx, b.client, pods, 32); err != nil {
		return nil, err
	}
	created := time.Since(begin)
	admitted := b.admissionCounters(ctx)
	fmt.Fprintf(os.Stderr, "realsched: %d pods created in %s\n", len(pods), created.Round(100*time.Millisecond))
	last := w.wait(ctx, cfg.settle)
	stopWatch()
	cpuAfter, err := b.cp.CPUSeconds()
	if err != nil {
		return nil, err
	}
	p, err := b.cp.PlacementOf(ctx, namespace)
	if err != nil {
		return nil, err
	}
	res := &result{Packing: mode + map[bool]string{true: "-down"}[cfg.extenderDown] + map[bool]string{true: "-opted-out"}[optOut],
		Round: round, Nodes: cfg.nodes, GPUs: cfg.gpus,
		Placed: p.Bound, Total: len(pods), GPUsUsed: p.GPUs, LowerBound: p.LowerBound, NodesUsed: p.Nodes,
		CreateSeconds: created.Seconds(),
		WebhookCalls:  int(admitted.webhook - counters.webhook), PolicyMutations: int(admitted.policy - counters.policy)}
	if p.Bound > 0 {
		res.Seconds = last.Sub(begin).Seconds()
		res.PodsPerSecond = float64(p.Bound) / res.Seconds
		res.SteadyPodsPerSecond = w.steadyRate()
	}
	res.cpuFigures = cpuSpent(cpuBefore, cpuAfter, p.Bound)
	return res, ctx.Err()
}

func createNamespace(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	// Admission refuses pods until the default ServiceAccount exists.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// createPods creates the pods in order from several workers, as a
// controller creating replicas does.
func createPods(ctx context.Context, client kubernetes.Interface, pods []*v1.Pod, workers int) error {
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(pods) || ctx.Err() != nil {
					return
				}
				p := pods[i].DeepCopy()
				p.Namespace = namespace
				if _, err := client.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs[w] = fmt.Errorf("creating pod %s: %w", p.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// watcher follows the pods from an informer: which are bound, which the
// scheduler found unschedulable, and when the last bind was seen.
type watcher struct {
	client kubernetes.Interface
	total  int

	mu       sync.Mutex
	bound    map[string]bool
	binds    []time.Time
	unsched  map[string]bool
	lastBind time.Time
	changed  time.Time
}

func newWatcher(client kubernetes.Interface, total int) *watcher {
	return &watcher{client: client, total: total, bound: map[string]bool{}, unsched: map[string]bool{}}
}

func (w *watcher) start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(w.client, 0, informers.WithNamespace(namespace))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("waiting for the pod informer: %w", ctx.Err())
	}
	return nil
}

func (w *watcher) observe(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if pod.Spec.NodeName != "" && !w.bound[pod.Name] {
		w.bound[pod.Name] = true
		w.binds = append(w.binds, now)
		delete(w.unsched, pod.Name)
		w.lastBind, w.changed = now, now
		return
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable && !w.unsched[pod.Name] {
			w.unsched[pod.Name] = true
			w.changed = now
		}
	}
}

// wait returns the time of the last bind once every pod is bound, or
// every pod is bound or unschedulable and nothing changed for settle.
func (w *watcher) wait(ctx context.Context, settle time.Duration) time.Time {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		bound, unsched, last, changed := len(w.bound), len(w.unsched), w.lastBind, w.changed
		w.mu.Unlock()
		if bound == w.total || (bound+unsched == w.total && time.Since(changed) > settle) {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-tick.C:
		}
	}
}

// steadyRate is the bind rate between the 10th and the 90th percentile
// bind: the scheduler's throughput without the start (first webhook
// calls, informers catching up) and the tail.
func (w *watcher) steadyRate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.binds)
	lo, hi := n/10, n-1-n/10
	if hi <= lo {
		return 0
	}
	span := w.binds[hi].Sub(w.binds[lo]).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(hi-lo) / span
}

// freeLoopbackAddress is a loopback address with a port free now, for a
// server started later.
func freeLoopbackAddress() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("choosing the extender's port: %w", err)
	}
	addr := lis.Addr().String()
	return addr, lis.Close()
}

// fractionTemplate names a template of the workload that asks for a
// fraction (the probe that tells when the API server applies the packing
// policy), or "" if none does.
func (b *bench) fractionTemplate() string {
	for _, t := range b.wl.templates {
		if _, ok := nodelabel.FractionMemory(&t.Spec.Spec); ok {
			return t.Name
		}
	}
	return ""
}

// admission counts kube-apiserver's calls to the packing webhook and its
// applications of the packing policy: which path packed a phase's pods.
type packingCounters struct{ webhook, policy float64 }

// admissionCounters reads them; a read that fails counts 0 (the figures
// are reported, never checked).
func (b *bench) admissionCounters(ctx context.Context) packingCounters {
	var a packingCounters
	a.webhook, a.policy, _ = b.cp.PackingCounters(ctx, harness.PackingWebhookName, harness.PackingPolicyName(namespace))
	return a
}
