// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

const (
	ns   = "gpufrac-system"
	node = "node-a"
)

// kubelet marks daemon pods Running and Ready, as a node whose startup
// probe passed would, and plays the daemon's script answering the plugin's
// settings (template_test runs the real script); ready=false plays a
// daemon that never answers.
func kubelet(ctx context.Context, t *testing.T, client *fake.Clientset, ready bool) {
	kubeletApplying(ctx, t, client, ready, ready)
}

// kubeletApplying is kubelet with the daemon's answering of the settings
// chosen apart from its readiness. It has stopped by the time the
// temporary directories made before it are removed: its answers are files
// written into them, and a directory still written into cannot be removed
// (CI saw t.TempDir's cleanup fail with "directory not empty"). Callers
// make their t.TempDir first.
func kubeletApplying(ctx context.Context, t *testing.T, client *fake.Clientset, ready, applies bool) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, p := range pods.Items {
					if applies {
						applySettings(p)
					}
					if p.Status.Phase == corev1.PodRunning {
						continue
					}
					p.Status.Phase = corev1.PodRunning
					status := corev1.ConditionFalse
					if ready {
						status = corev1.ConditionTrue
					}
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
					_, _ = client.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func applySettings(p corev1.Pod) {
	for _, v := range p.Spec.Volumes {
		if v.Name != "config" || v.HostPath == nil {
			continue
		}
		for _, file := range []string{mps.ConfigFile, mps.NamespacesFile} {
			if raw, err := os.ReadFile(filepath.Join(v.HostPath.Path, file)); err == nil {
				_ = os.WriteFile(filepath.Join(v.HostPath.Path, file+mps.AppliedSuffix), raw, 0o644)
			}
		}
	}
}

func (e *restartEvents) DaemonRecovered(c *plan.Claim) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recovered = append(e.recovered, c.Name)
}

type restartEvents struct {
	recovered []string
	mu        sync.Mutex
	claims    []string
}

func (e *restartEvents) DaemonRestarted(c *plan.Claim, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.claims = append(e.claims, c.Name+": "+reason)
}

func smClaim(root, name, gpu string, hardGiB int64) *plan.Claim {
	return &plan.Claim{UID: types.UID("uid-" + name), Namespace: "ns", Name: name, Devices: []plan.Device{{
		Request: "gpu", Pool: node, Device: "gpu-0", GPU: domain.GPU{UUID: gpu},
		SoftLimitBytes: 8 << 30, HardLimitBytes: hardGiB << 30, ComputeMode: v1alpha1.SMSharing,
		MPS: mpslayout.For(root, gpu),
	}}}
}

func daemonPods(t *testing.T, client *fake.Clientset) []corev1.Pod {
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func ceiling(t *testing.T, b *mpslayout.Binding) string {
	raw, err := os.ReadFile(filepath.Join(mps.ConfigDir(*b), mps.ConfigFile))
	if err != nil {
		return "<none>"
	}
	return strings.TrimSpace(string(raw))
}

func TestLifecycle(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	m := newManager(t, client, 10*time.Second, nil)

	first := smClaim(root, "first", "GPU-a", 24)
	if err := m.Acquire(ctx, *first.MPS(), first); err != nil {
		t.Fatal(err)
	}
	pods := daemonPods(t, client)
	if len(pods) != 1 {
		t.Fatalf("%d daemon pods, want 1", len(pods))
	}
	p := pods[0]
	if p.Name != mps.PodName(node, "GPU-a") || p.Spec.NodeName != node || p.Labels[mps.LabelGPU] != "GPU-a" || !p.Spec.HostPID {
		t.Errorf("daemon pod %s node %s labels %v hostPID %v", p.Name, p.Spec.NodeName, p.Labels, p.Spec.HostPID)
	}
	vols := map[string]string{}
	for _, v := range p.Spec.Volumes {
		switch {
		case v.HostPath != nil:
			vols[v.Name] = v.HostPath.Path
		case v.EmptyDir != nil:
			vols[v.Name] = "emptyDir " + string(v.EmptyDir.Medium)
		}
	}
	b := first.MPS()
	// The daemon's /dev/shm is a tmpfs of its own (issue 33): no host
	// directory every client of the GPU could share.
	if vols["pipe"] != b.PipeDir || vols["log"] != b.LogDir || vols["shm"] != "emptyDir Memory" || vols["config"] != mps.ConfigDir(*b) {
		t.Errorf("volumes %v do not match binding %+v with shm an emptyDir in memory", vols, b)
	}
	if _, err := os.Stat(b.ShmDir); !os.IsNotExist(err) {
		t.Errorf("the plugin made a host shm directory %s: %v", b.ShmDir, err)
	}
	if got := ceiling(t, b); got != "24576" {
		t.Errorf("ceiling %s MiB, want 24576", got)
	}

	// A second claim joins the same daemon and raises the ceiling.
	second := smClaim(root, "second", "GPU-a", 40)
	if err := m.Acquire(ctx, *second.MPS(), second); err != nil {
		t.Fatal(err)
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Errorf("%d daemon pods after a second claim, want 1", n)
	}
	if got := ceiling(t, b); got != "40960" {
		t.Errorf("ceiling %s MiB, want the larger limit 40960", got)
	}
	if users := m.Users(); users["GPU-a"] != 2 {
		t.Errorf("users %v", users)
	}

	// The larger claim leaves: the ceiling comes down, the daemon stays.
	if err := m.Release(ctx, *b, second.UID); err != nil {
		t.Fatal(err)
	}
	if got := ceiling(t, b); got != "24576" {
		t.Errorf("ceiling %s MiB after release, want 24576", got)
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Errorf("daemon gone while a claim uses it")
	}
	// The last claim leaves: daemon and directories go, the log stays.
	if err := m.Release(ctx, *b, first.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(daemonPods(t, client)); n != 0 {
		t.Errorf("%d daemon pods after the last release", n)
	}
	for _, dir := range []string{b.PipeDir, b.ShmDir, mps.ConfigDir(*b)} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s left behind", dir)
		}
	}
	if err := m.Release(ctx, *b, "never-acquired"); err != nil {
		t.Errorf("releasing an unknown claim: %v", err)
	}
}

func TestDaemonThatNeverBecomesReadyFailsAndLeavesNothing(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, false)
	c := smClaim(root, "c", "GPU-a", 8)
	b := c.MPS()
	if err := os.MkdirAll(b.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.LogDir, "control.log"), []byte("[start]\n[ERROR] cannot open /dev/nvidia0: permission denied\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, client, 300*time.Millisecond, nil)
	err := m.Acquire(ctx, *b, c)
	if err == nil {
		t.Fatal("Acquire succeeded without a ready daemon")
	}
	for _, want := range []string{mps.PodName(node, "GPU-a"), "GPU-a is not ready after ", "phase Running", "cannot open /dev/nvidia0: permission denied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := len(daemonPods(t, client)); n != 0 {
		t.Errorf("%d daemon pods left after a failed start", n)
	}
	if len(m.Users()) != 0 {
		t.Errorf("reference left after a failed start: %v", m.Users())
	}
}

func TestRestoreRebuildsCountsAndCollectsGarbage(t *testing.T) {
	ctx, client, root := testNode(t)
	kubelet(ctx, t, client, true)
	before := newManager(t, client, 10*time.Second, nil)
	used, unused := smClaim(root, "used", "GPU-a", 8), smClaim(root, "unused", "GPU-b", 8)
	for _, c := range []*plan.Claim{used, unused} {
		if err := before.Acquire(ctx, *c.MPS(), c); err != nil {
			t.Fatal(err)
		}
	}
	// The plugin restarts; the checkpoint says only "used" is prepared
	// (the other was unprepared while the plugin was down).
	ev := &restartEvents{}
	after := newManager(t, client, 10*time.Second, ev)
	if err := after.Restore(ctx, []plan.Claim{*used, {UID: "tslice", Devices: []plan.Device{{ComputeMode: v1alpha1.TimeSlicing}}}}); err != nil {
		t.Fatal(err)
	}
	pods := daemonPods(t, client)
	if len(pods) != 1 || pods[0].Labels[mps.LabelGPU] != "GPU-a" {
		t.Fatalf("daemons after restore: %d, want only GPU-a's", len(pods))
	}
	if users := after.Users(); users["GPU-a"] != 1 || len(users) != 1 {
		t.Errorf("users after restore %v", users)
	}
	// A daemon that disappears while used is recreated, and its claims told.
	if err := client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := after.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Errorf("%d daemons after the used one vanished, want it recreated", n)
	}
	if len(ev.claims) != 1 || !strings.Contains(ev.claims[0], "used: the MPS daemon of GPU GPU-a is gone") {
		t.Errorf("events %v", ev.claims)
	}
	// Once the new daemon is ready, the next pass tells its claims, once.
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := after.Restore(ctx, nil); err != nil {
			return false, err
		}
		ev.mu.Lock()
		defer ev.mu.Unlock()
		return len(ev.recovered) > 0, nil
	})
	if err != nil {
		t.Fatalf("the recreated daemon's readiness was never reported: %v", err)
	}
	if err := after.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ev.recovered[0] != "used" || len(ev.recovered) != 1 {
		t.Errorf("recovered %v, want [used] once", ev.recovered)
	}
}

func TestRenderRefusesATemplateThatDropsTheLabels(t *testing.T) {
	broken := strings.Replace(templates.MPSControlDaemon, "gpufrac.dev/gpu: \"{{.DaemonKey}}\"", "", 1)
	_, err := mps.Render(broken, mps.DaemonParams{Name: "n", Namespace: ns, NodeName: node, GPUUUID: "GPU-a", Image: "i", DriverRoot: "/", Version: "legacy"})
	if err == nil || !strings.Contains(err.Error(), "must keep the labels") {
		t.Errorf("got %v", err)
	}
	_, err = mps.Render("{{.Nope}}", mps.DaemonParams{})
	if err == nil || !strings.Contains(err.Error(), "rendering the MPS daemon template") {
		t.Errorf("got %v", err)
	}
}

// TestCallerDeadlineKeepsTheStartingDaemon: when the kubelet's Prepare
// deadline ends before the daemon is ready, the claim's use is dropped but
// the daemon keeps starting, so the retry finds it instead of starting over.
func TestCallerDeadlineKeepsTheStartingDaemon(t *testing.T) {
	ctx, client, root := testNode(t)
	m := newManager(t, client, time.Minute, nil)
	c := smClaim(root, "c", "GPU-a", 8)
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if err := m.Acquire(short, *c.MPS(), c); err == nil {
		t.Fatal("Acquire succeeded without a ready daemon")
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Fatalf("%d daemon pods after the caller gave up, want the starting one kept", n)
	}
	if len(m.Users()) != 0 {
		t.Errorf("the claim's use was kept: %v", m.Users())
	}
	// Garbage collection spares the young daemon; the retry finds it ready.
	if err := m.Restore(ctx, nil); err != nil {
		t.Fatal(err)
	}
	kubelet(ctx, t, client, true)
	if err := m.Acquire(ctx, *c.MPS(), c); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := len(daemonPods(t, client)); n != 1 {
		t.Errorf("%d daemon pods after the retry, want 1", n)
	}
}

// TestDaemonSlowerThanThreeSecondsIsAwaited: a real daemon Pod is Ready
// after its init container and a startup probe or two, about 4 s on a real
// node; Acquire waits up to ReadyTimeout, not a few backoff steps.
func TestDaemonSlowerThanThreeSecondsIsAwaited(t *testing.T) {
	ctx, client, root := testNode(t)
	go func() {
		time.Sleep(4 * time.Second)
		kubelet(ctx, t, client, true)
	}()
	c := smClaim(root, "c", "GPU-a", 8)
	m := newManager(t, client, 20*time.Second, nil)
	start := time.Now()
	if err := m.Acquire(ctx, *c.MPS(), c); err != nil {
		t.Fatalf("Acquire gave up on a daemon that became ready after 4 s: %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Acquire took %s for a daemon ready after 4 s", d)
	}
}

// TestRunWatchesInsteadOfPolling: a daemon that disappears while a claim
// uses it comes back at once, from the watch, with the periodic pass an
// hour away; and the API is listed once (the watch's start), not per pass.
func TestRunWatchesInsteadOfPolling(t *testing.T) {
	ctx, client, root := testNode(t)
	ctx, cancel := context.WithCancel(ctx)
	kubelet(ctx, t, client, true)
	m := newManager(t, client, 10*time.Second, nil)
	c := smClaim(root, "used", "GPU-a", 8)
	if err := m.Acquire(ctx, *c.MPS(), c); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, time.Hour)
	}()
	defer func() { cancel(); <-done }()
	pods := daemonPods(t, client)
	if len(pods) != 1 {
		t.Fatalf("%d daemons", len(pods))
	}
	// The fake clientset's watch sees only what happens after it starts
	// (no resourceVersion replay, unlike an API server): delete once the
	// manager watches, or the deletion can fall between its list and watch.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, a := range client.Actions() {
			if w, ok := a.(k8stesting.WatchAction); ok && a.GetResource().Resource == "pods" && !w.GetWatchRestrictions().Labels.Empty() {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the manager never started its watch: %v", err)
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(daemonPods(t, client)) == 1, nil
	})
	if err != nil {
		t.Fatalf("the deleted daemon was not recreated from the watch: %v", err)
	}
	// The test's own lists (and its kubelet's) carry no label selector.
	lists := 0
	for _, a := range client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" && !l.GetListRestrictions().Labels.Empty() {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("the manager listed its daemons %d times; want once, for its watch", lists)
	}
}
