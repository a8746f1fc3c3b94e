// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
)

const (
	nodeName  = "bench-node"
	namespace = "prepcompare"
	// apiQPS lifts both plugins' client rate limits, so the limiter is
	// not what is measured.
	apiQPS = "10000"
)

// pluginSpec is one plugin binary and how to drive it.
type pluginSpec struct {
	// kind says how to start the binary (gpufrac or example); label names
	// it in the table, so two builds of one kind compare side by side
	// (-plugin gpufrac:json=A -plugin gpufrac:proto=B).
	kind, label, binary, driver string
}

func parsePlugins(values []string) ([]pluginSpec, error) {
	if len(values) == 0 {
		return nil, errors.New("give at least one -plugin KIND=BINARY")
	}
	var out []pluginSpec
	for _, v := range values {
		label, bin, ok := strings.Cut(v, "=")
		if !ok || bin == "" {
			return nil, fmt.Errorf("-plugin %q: want KIND[:LABEL]=BINARY", v)
		}
		kind, _, _ := strings.Cut(label, ":")
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-plugin %q: %w", v, err)
		}
		switch kind {
		case "gpufrac":
			out = append(out, pluginSpec{kind: kind, label: label, binary: bin, driver: "gpufrac.dev"})
		case "example":
			out = append(out, pluginSpec{kind: kind, label: label, binary: bin, driver: "gpu.example.com"})
		default:
			return nil, fmt.Errorf("-plugin %q: kind %q is neither gpufrac nor example", v, kind)
		}
	}
	return out, nil
}

// gpufracBinary lets the harness use the gpufrac binary under test rather
// than build one.
func gpufracBinary(specs []pluginSpec) string {
	for _, s := range specs {
		if s.kind == "gpufrac" {
			return s.binary
		}
	}
	return ""
}

type bench struct {
	cp             *harness.ControlPlane
	claims, rounds int
	// fresh creates new claims for every round and deletes them after
	// their Unprepare, as short jobs do; otherwise one set of claims is
	// prepared and unprepared round after round.
	fresh bool
	// settle waits, untimed, between a round's Prepares and its
	// Unprepares until every claim shows the plugin's status.devices, as
	// pods run a while in a cluster before their claims are unprepared.
	settle bool
	seq    atomic.Int64
}

func (b *bench) setup(ctx context.Context) error {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}}}
	if _, err := b.cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Node %s: %w", nodeName, err)
	}
	for _, ns := range []string{namespace, "gpufrac-system"} {
		if _, err := b.cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}

type stats struct {
	p50, p99 time.Duration
	perSec   float64
}

type result struct {
	label              string
	conc, run          int
	prepare, unprepare stats
	// statusLag is, per round with settle, how long after its last
	// Prepare returned every claim showed its status.
	statusLag []time.Duration
}

// measure starts the plugin, prepares and unprepares b.claims claims
// b.rounds times at concurrency conc, and stops it.
func (b *bench) measure(ctx context.Context, spec pluginSpec, conc int) (result, error) {
	id := b.seq.Add(1)
	dir := filepath.Join(b.cp.Dir, fmt.Sprintf("%s-%d", spec.kind, id))
	proc, endpoint, err := b.startPlugin(ctx, spec, dir)
	if err != nil {
		return result{}, err
	}
	defer proc.stop()
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{}, err
	}
	defer func() { _ = conn.Close() }()
	dra := drapb.NewDRAPluginClient(conn)
	refs, err := b.createClaims(ctx, spec, id)
	if err != nil {
		return result{}, err
	}
	defer func() { b.deleteClaims(context.WithoutCancel(ctx), refs) }()
	var prepLat, unprepLat []time.Duration
	var prepTime, unprepTime time.Duration
	var statusLag []time.Duration
	var mu sync.Mutex
	var firstErr error
	call := func(lat *[]time.Duration, f func(ref *drapb.Claim) (string, error)) func(ref *drapb.Claim) {
		return func(ref *drapb.Claim) {
			start := time.Now()
			msg, err := f(ref)
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			*lat = append(*lat, d)
			if err == nil && msg != "" {
				err = errors.New(msg)
			}
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("claim %s: %w", ref.Name, err)
			}
		}
	}
	prepare := call(&prepLat, func(ref *drapb.Claim) (string, error) {
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{ref}})
		if err != nil {
			return "", err
		}
		return resp.Claims[ref.Uid].GetError(), nil
	})
	unprepare := call(&unprepLat, func(ref *drapb.Claim) (string, error) {
		resp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref}})
		if err != nil {
			return "", err
		}
		return resp.Claims[ref.Uid].GetError(), nil
	})
	for round := range b.rounds {
		if b.fresh && round > 0 {
			// Not timed: the API server's work on them is, as it
			// shares the machine with the plugin.
			b.deleteClaims(ctx, refs)
			if refs, err = b.createClaims(ctx, spec, b.seq.Add(1)); err != nil {
				return result{}, err
			}
		}
		prepTime += fanOut(conc, refs, prepare)
		if b.settle && spec.kind == "gpufrac" {
			lag, err := b.waitForStatus(ctx, refs)
			if err != nil {
				return result{}, fmt.Errorf("%w (plugin log: %s)", err, proc.log)
			}
			statusLag = append(statusLag, lag)
		}
		unprepTime += fanOut(conc, refs, unprepare)
		if firstErr != nil {
			return result{}, fmt.Errorf("%w (plugin log: %s)", firstErr, proc.log)
		}
	}
	return result{label: spec.label, conc: conc, prepare: summarize(prepLat, prepTime), unprepare: summarize(unprepLat, unprepTime), statusLag: statusLag}, nil
}

// waitForStatus polls until every claim of refs has a status.devices
// entry of gpufrac and says how long that took.
func (b *bench) waitForStatus(ctx context.Context, refs []*drapb.Claim) (time.Duration, error) {
	start := time.Now()
	pending := slices.Clone(refs)
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var left []*drapb.Claim
		for _, ref := range pending {
			c, err := b.cp.Client.ResourceV1().ResourceClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !slices.ContainsFunc(c.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver == "gpufrac.dev" }) {
				left = append(left, ref)
			}
		}
		pending = left
		return len(pending) == 0, nil
	})
	if err != nil {
		return 0, fmt.Errorf("waiting for the status of %d claims: %w", len(pending), err)
	}
	return time.Since(start), nil
}

func fanOut(conc int, refs []*drapb.Claim, f func(*drapb.Claim)) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(refs); i = int(next.Add(1)) - 1 {
				f(refs[i])
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func summarize(lat []time.Duration, total time.Duration) stats {
	slices.Sort(lat)
	return stats{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], perSec: float64(len(lat)) / total.Seconds()}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// plugin is a started plugin process.
type plugin struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (p *plugin) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (b *bench) startPlugin(ctx context.Context, spec pluginSpec, dir string) (*plugin, string, error) {
	registrar, data, cdiRoot := filepath.Join(dir, "registry"), filepath.Join(dir, "plugins"), filepath.Join(dir, "cdi")
	for _, d := range []string{registrar, data, cdiRoot} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, "", err
		}
	}
	var args []string
	switch spec.kind {
	case "gpufrac":
		args = []string{"--node-name=" + nodeName, "--simulate-gpus=h200x8", "--kubeconfig=" + b.cp.Kubeconfig,
			"--plugin-data-dir=" + filepath.Join(data, spec.driver), "--registrar-dir=" + registrar, "--cdi-root=" + cdiRoot,
			"--metrics-address=", "--kube-api-qps=" + apiQPS, "--kube-api-burst=" + apiQPS}
	case "example":
		args = []string{"--node-name=" + nodeName, "--kubeconfig=" + b.cp.Kubeconfig, "--cdi-root=" + cdiRoot,
			"--kubelet-registrar-directory-path=" + registrar, "--kubelet-plugins-directory-path=" + data,
			"--num-devices=8", "--kube-api-qps=" + apiQPS, "--kube-api-burst=" + apiQPS}
	}
	logPath := filepath.Join(dir, "plugin.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(spec.binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", spec.binary, err)
	}
	p := &plugin{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	regSock := filepath.Join(registrar, spec.driver+"-reg.sock")
	var endpoint string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("%s exited: see %s", spec.kind, logPath)
		default:
		}
		if _, err := os.Stat(regSock); err != nil {
			return false, nil
		}
		conn, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, nil
		}
		defer func() { _ = conn.Close() }()
		info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		if err != nil {
			return false, nil
		}
		endpoint = info.Endpoint
		return true, nil
	})
	if err != nil {
		p.stop()
		return nil, "", fmt.Errorf("waiting for %s to register: %w", spec.kind, err)
	}
	return p, endpoint, nil
}

// createClaims creates allocated claims on the node's devices: 4 claims a
// GPU for 32 claims on 8 GPUs, with shares of 10Gi for gpufrac (which
// counts memory), plain allocations for the example driver.
func (b *bench) createClaims(ctx context.Context, spec pluginSpec, id int64) ([]*drapb.Claim, error) {
	api := b.cp.Client.ResourceV1().ResourceClaims(namespace)
	var refs []*drapb.Claim
	for i := range b.claims {
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-%d", spec.kind, id, i), Namespace: namespace,
				Labels: map[string]string{"prepcompare": fmt.Sprint(id)}},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: spec.driver},
			}}}},
		}
		created, err := api.Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating claim: %w", err)
		}
		// The pod the claim is reserved for, as the scheduler leaves it
		// before binding: a plugin that reads it at Prepare (gpufrac's
		// one-guarantee check) pays for that here as in a cluster. Bound
		// to the node directly; no kubelet runs it.
		pod, err := b.cp.Client.CoreV1().Pods(namespace).Create(ctx, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: created.Name, Namespace: namespace, Labels: claim.Labels},
			Spec: v1.PodSpec{
				NodeName:       nodeName,
				Containers:     []v1.Container{{Name: "main", Image: "registry.invalid/none", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &created.Name}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating the pod of claim %s: %w", created.Name, err)
		}
		created.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		res := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: spec.driver, Pool: nodeName, Device: fmt.Sprintf("gpu-%d", i%8)}
		if spec.kind == "gpufrac" {
			share := uuid.NewUUID()
			res.ShareID = &share
			res.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}
		}
		created.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{res}}}
		if _, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("allocating claim %s: %w", created.Name, err)
		}
		refs = append(refs, &drapb.Claim{Namespace: namespace, Name: created.Name, Uid: string(created.UID)})
	}
	return refs, nil
}

func (b *bench) deleteClaims(ctx context.Context, refs []*drapb.Claim) {
	for _, r := range refs {
		_ = b.cp.Client.CoreV1().Pods(namespace).Delete(ctx, r.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		_ = b.cp.Client.ResourceV1().ResourceClaims(namespace).Delete(ctx, r.Name, metav1.DeleteOptions{})
	}
}
