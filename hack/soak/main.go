// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command soak churns the real kubelet plugin: thousands of
// NodePrepareResources / NodeUnprepareResources calls over its DRA gRPC
// socket, for claims the real kube-scheduler allocated on the integration
// harness's real API server, with the plugin restarted (SIGTERM and
// SIGKILL in turn) every few hundred cycles. It prints the plugin's
// resident memory, goroutines and open files at the start and end of each
// process lifetime, every error, and checks at the end that nothing was
// lost or left behind: no CDI spec, no checkpoint entry, no claim status.
//
//	go run ./hack/soak               # 10,000 cycles over 500 claims
//	go run ./hack/soak -cycles 2000  # shorter
//
// A cycle is one claim prepared and unprepared again. Claims go in batches
// (as the kubelet sends a pod's claims in one call); a batch is unprepared
// after the next one is prepared, so a restart always finds claims
// prepared that the new process must carry on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/harness/kubeletstandin"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/plugin"
)

const (
	driver    = "gpufrac.dev"
	namespace = "soak"
	// claimsPerPod keeps each pod's allocation small for the scheduler.
	claimsPerPod = 25
)

type options struct {
	cycles, claims, batch, parallel, restartEvery int
	qps                                           int
}

func main() {
	var o options
	flag.IntVar(&o.cycles, "cycles", 10000, "claims to prepare and unprepare in all")
	flag.IntVar(&o.claims, "claims", 500, "allocated claims to cycle through (a multiple of 25)")
	flag.IntVar(&o.batch, "batch", 10, "claims per NodePrepareResources call")
	flag.IntVar(&o.parallel, "parallel", 5, "calls in flight at once")
	flag.IntVar(&o.restartEvery, "restart-every", 500, "cycles between plugin restarts; 0: one process throughout")
	// The DRA helper GETs every claim and the status writer reads and
	// updates it: at the plugin's default 50 QPS the client's rate
	// limiter, not the plugin, would set the pace.
	flag.IntVar(&o.qps, "kube-api-qps", 500, "the plugin's --kube-api-qps")
	flag.Parse()
	step := o.batch * o.parallel
	if o.claims%claimsPerPod != 0 || o.cycles%step != 0 || o.claims%step != 0 || o.restartEvery%step != 0 || o.restartEvery < 0 {
		fmt.Fprintln(os.Stderr, "soak: -claims must be a multiple of 25, and -cycles, -claims and -restart-every multiples of -batch x -parallel")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The harness logs through klog; its progress lines are what matter.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(1)
	}
}

// sample is the plugin process's footprint at one instant.
type sample struct {
	label      string
	cycles     int
	pid        int
	rss        uint64
	goroutines int
	fds        int
}

type soak struct {
	o       options
	cp      *harness.ControlPlane
	node    *harness.Node
	port    int
	extra   []string
	plugin  *kubeletstandin.Plugin
	claims  []*drapb.Claim
	samples []sample
	errs    []error
}

func run(ctx context.Context, o options) (finalErr error) {
	cp, err := harness.Start(ctx, harness.Options{Progress: os.Stderr})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() { finalErr = errors.Join(finalErr, cp.Close()) }()
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	s := &soak{o: o, cp: cp, port: port}
	// -v=1: the harness's -v=4 would log every claim, and the soak is
	// about the plugin, not its log volume.
	s.extra = []string{"--metrics-address=127.0.0.1:" + strconv.Itoa(port), "-v=1",
		"--kube-api-qps=" + strconv.Itoa(o.qps), "--kube-api-burst=" + strconv.Itoa(2*o.qps)}
	// MPS off (NoMPS): the soak runs no kubelet, so nothing would run the
	// plugin's MPS daemon Pods, and on this r615-class node every fraction
	// is an MPS client: each Prepare would wait out --mps-ready-timeout for
	// a daemon that never starts. The soak is about the plugin's own churn
	// (checkpoint, CDI specs, status, restarts); the daemon's lifecycle is
	// covered by test/integration and test/e2e, which run the daemons.
	s.node, err = cp.AddNode(ctx, harness.NodeOptions{
		Name: "soak", GPUs: "h200x8", NoStandIn: true, NoMPS: true, MaxPods: o.claims/claimsPerPod + 10, PluginArgs: s.extra,
	})
	if err != nil {
		return err
	}
	allocStart := time.Now()
	if err := s.allocate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "soak: %d claims allocated by kube-scheduler in %s\n", len(s.claims), time.Since(allocStart).Round(time.Second))
	if err := s.dial(ctx); err != nil {
		return err
	}
	defer func() { s.plugin.Close() }()

	churn := time.Now()
	if err := s.churn(ctx); err != nil {
		return err
	}
	elapsed := time.Since(churn)
	leftover := s.leftovers(ctx)
	s.report(os.Stdout, elapsed, leftover)
	if len(s.errs) > 0 || leftover != nil {
		return fmt.Errorf("%d errors during the churn; leftovers: %v", len(s.errs), leftover)
	}
	return nil
}

// allocate creates the claims through pods (one pod, 25 claims) and waits
// until the scheduler allocated all of them on the soak node. Nobody runs
// the pods: the soak calls the plugin itself.
func (s *soak) allocate(ctx context.Context) error {
	client := s.cp.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "soak"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`},
		}}},
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating DeviceClass soak: %w", err)
	}
	// 500 x 2Gi fit 8 x H200 with room to spare.
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "share-2g", Namespace: namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "soak", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("2Gi")}},
			}}},
		}}},
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the claim template: %w", err)
	}
	if err := waitServiceAccount(ctx, s.cp); err != nil {
		return err
	}
	for p := range s.o.claims / claimsPerPod {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%02d", p), Namespace: namespace},
			Spec: v1.PodSpec{
				NodeSelector: map[string]string{"kubernetes.io/hostname": s.node.Name},
				Containers:   []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		for c := range claimsPerPod {
			pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{
				Name: fmt.Sprintf("c%02d", c), ResourceClaimTemplateName: ptr.To("share-2g"),
			})
		}
		if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
	}
	var allocated []*drapb.Claim
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		allocated = allocated[:0]
		for _, c := range list.Items {
			if c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0 {
				allocated = append(allocated, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
			}
		}
		return len(allocated) == s.o.claims, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d allocated claims (have %d): %w", s.o.claims, len(allocated), err)
	}
	s.claims = allocated
	return nil
}

func waitServiceAccount(ctx context.Context, cp *harness.ControlPlane) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// dial registers the (possibly restarted) plugin as the kubelet would.
func (s *soak) dial(ctx context.Context) error {
	if s.plugin != nil {
		s.plugin.Close()
	}
	p, err := kubeletstandin.Dial(ctx, s.node.RegistrarDir, driver, time.Minute)
	if err != nil {
		return fmt.Errorf("registering the plugin: %w", err)
	}
	s.plugin = p
	return nil
}

// churn runs the cycles in steps of parallel calls of batch claims each,
// restarting the plugin every restartEvery cycles, and samples the
// process at the start (after its first step) and end of each lifetime.
func (s *soak) churn(ctx context.Context) error {
	step := s.o.batch * s.o.parallel
	var prev []*drapb.Claim
	life := 1
	for done := 0; done < s.o.cycles; done += step {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lifeStarts := done == 0
		if done > 0 && s.o.restartEvery > 0 && done%s.o.restartEvery == 0 {
			s.sample(ctx, fmt.Sprintf("life %d end", life), done)
			if err := s.restart(ctx, life%2 == 0); err != nil {
				return err
			}
			life++
			lifeStarts = true
		}
		first := done % len(s.claims)
		cur := s.claims[first : first+step]
		s.calls(ctx, cur, s.prepare)
		if prev != nil {
			s.calls(ctx, prev, s.unprepare)
		}
		prev = cur
		if lifeStarts {
			// After one step the process is warm (connections, informers,
			// first allocations): what growth is measured from.
			s.sample(ctx, fmt.Sprintf("life %d start", life), done+step)
		}
	}
	s.calls(ctx, prev, s.unprepare)
	s.sample(ctx, fmt.Sprintf("life %d end", life), s.o.cycles)
	return nil
}

// calls sends claims in parallel calls of batch claims each, as a kubelet
// preparing several pods at once does.
func (s *soak) calls(ctx context.Context, claims []*drapb.Claim, call func(context.Context, []*drapb.Claim) []error) {
	results := make([][]error, s.o.parallel)
	var wg sync.WaitGroup
	for i := range s.o.parallel {
		wg.Go(func() { results[i] = call(ctx, claims[i*s.o.batch:(i+1)*s.o.batch]) })
	}
	wg.Wait()
	for _, errs := range results {
		s.errs = append(s.errs, errs...)
	}
}

// restart stops the plugin (SIGTERM, or SIGKILL when kill) and starts it
// again; the soak registers the new process as the kubelet would.
func (s *soak) restart(ctx context.Context, kill bool) error {
	var err error
	if kill {
		err = s.node.KillPlugin(ctx)
	} else {
		err = s.node.StopPlugin()
	}
	if err != nil {
		return fmt.Errorf("stopping the plugin: %w", err)
	}
	if err := s.node.RestartPlugin(ctx, "", s.extra...); err != nil {
		return err
	}
	return s.dial(ctx)
}

func (s *soak) prepare(ctx context.Context, claims []*drapb.Claim) []error {
	resp, err := s.plugin.Prepare(ctx, claims)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, c := range claims {
		r, ok := resp.Claims[c.Uid]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("prepare of %s: no result", c.Name))
		case r.Error != "":
			errs = append(errs, fmt.Errorf("prepare of %s: %s", c.Name, r.Error))
		case len(r.Devices) != 1:
			errs = append(errs, fmt.Errorf("prepare of %s: %d devices, want 1", c.Name, len(r.Devices)))
		}
	}
	return errs
}

func (s *soak) unprepare(ctx context.Context, claims []*drapb.Claim) []error {
	resp, err := s.plugin.Unprepare(ctx, claims)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, c := range claims {
		if r, ok := resp.Claims[c.Uid]; !ok || r.Error != "" {
			errs = append(errs, fmt.Errorf("unprepare of %s: result %v", c.Name, r))
		}
	}
	return errs
}

// sample records the plugin's footprint: VmRSS and open descriptors from
// /proc, goroutines from its metrics (client_golang's Go collector).
func (s *soak) sample(ctx context.Context, label string, cycles int) {
	smp := sample{label: label, cycles: cycles, pid: s.node.PluginPID()}
	var err error
	if smp.rss, smp.fds, err = s.node.ProcStatus(); err != nil {
		s.errs = append(s.errs, err)
	}
	if smp.goroutines, err = goroutines(ctx, s.port); err != nil {
		s.errs = append(s.errs, err)
	}
	s.samples = append(s.samples, smp)
}

func goroutines(ctx context.Context, port int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scraping the plugin's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading the plugin's metrics: %w", err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(v, 64)
			return int(n), err
		}
	}
	return 0, errors.New("the plugin's metrics have no go_goroutines")
}

// leftovers checks that the churn lost and left nothing: no CDI spec, no
// checkpoint entry, and (once the status writer caught up) no claim with
// status.devices of this driver.
func (s *soak) leftovers(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = s.leftoversNow(ctx)
		return last == nil, nil
	})
	if err != nil {
		return last
	}
	return nil
}

func (s *soak) leftoversNow(ctx context.Context) error {
	specs, err := os.ReadDir(s.node.CDIRoot)
	if err != nil {
		return err
	}
	if len(specs) > 0 {
		return fmt.Errorf("%d CDI specs left in %s", len(specs), s.node.CDIRoot)
	}
	raw, err := os.ReadFile(filepath.Join(s.node.PluginDataDir, plugin.CheckpointFile))
	if err != nil {
		return err
	}
	d, err := checkpoint.Decode(raw)
	if err != nil {
		return err
	}
	if len(d.Claims) > 0 {
		return fmt.Errorf("%d checkpoint entries left", len(d.Claims))
	}
	list, err := s.cp.Client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	stale := 0
	for _, c := range list.Items {
		for _, d := range c.Status.Devices {
			if d.Driver == driver {
				stale++
				break
			}
		}
	}
	if stale > 0 {
		return fmt.Errorf("%d unprepared claims still have %s status.devices", stale, driver)
	}
	return nil
}

func (s *soak) report(w io.Writer, elapsed time.Duration, leftover error) {
	restarts := "one plugin process throughout"
	if s.o.restartEvery > 0 {
		restarts = fmt.Sprintf("plugin restarted every %d cycles (SIGTERM and SIGKILL in turn)", s.o.restartEvery)
	}
	fmt.Fprintf(w, "\n%d cycles (prepare + unprepare) over %d claims, %d calls of %d claims in flight, %s, %s (%.0f cycles/s)\n\n",
		s.o.cycles, len(s.claims), s.o.parallel, s.o.batch, restarts, elapsed.Round(time.Second), float64(s.o.cycles)/elapsed.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "when\tcycles\tpid\tRSS MiB\tgoroutines\topen fds\t")
	for _, smp := range s.samples {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t%d\t\n", smp.label, smp.cycles, smp.pid, float64(smp.rss)/(1<<20), smp.goroutines, smp.fds)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nerrors: %d\n", len(s.errs))
	for i, err := range s.errs {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more\n", len(s.errs)-10)
			break
		}
		fmt.Fprintf(w, "  %v\n", err)
	}
	if leftover != nil {
		fmt.Fprintf(w, "left behind: %v\n", leftover)
	} else {
		fmt.Fprintln(w, "left behind: nothing (no CDI spec, no checkpoint entry, no claim status of gpufrac.dev)")
	}
}
