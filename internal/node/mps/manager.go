// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Config of the manager.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	NodeName  string
	// Template is the text of templates/mps-control-daemon.yaml (templates.MPSControlDaemon) or
	// the --mps-template that replaces it.
	Template string
	// Image is the plugin's own image, which holds gpufrac-mps-launcher;
	// the daemon runs the node's MPS binaries under DriverRoot with it.
	Image string
	// DriverRoot is the host path of the node's NVIDIA driver root.
	DriverRoot string
	// Version is the node's MPS version (domain.MPSVersionV3 or
	// domain.MPSVersionLegacy).
	Version string
	// DriverVersion ("615.23.01") selects the MPS v3 configuration keys
	// the node's driver accepts.
	DriverVersion string
	// ReadyTimeout bounds how long Prepare waits for a new daemon.
	ReadyTimeout time.Duration
	// Events reports daemon trouble on the claims that use it; optional.
	// Clients the daemon terminates are reported through
	// WatchTerminations (evictions.go).
	Events Events
	// RecordDir is where gpufrac-cdi-hook records containers; it maps an
	// evicted client's cgroup to its claim.
	RecordDir string
	// DefaultNamespaceLimits are the MPS v3 shared server's default
	// namespace limits; zero fields take DefaultSafetyLimits'.
	DefaultNamespaceLimits NamespaceLimits
	// GPUMemoryMiB is the memory of each of the node's GPUs. A node
	// server serves GPUs no claim uses yet; the MPS double sizes its
	// ledger of each from it. Optional: a GPU missing here takes the size
	// its claims know.
	GPUMemoryMiB map[string]int64
	// KeepUnused, when set and returning a reason, stops the removal of
	// daemons no known claim uses: the caller cannot name every claim
	// (a quarantined checkpoint entry may be using one).
	KeepUnused func() string
	// NodeServerGPUs, where the node runs the node server, returns the
	// GPUs one started now would serve (the node's fraction GPUs as they
	// are now); a restore compares the running server's with them
	// (serverset.go). Nil: per-GPU daemons.
	NodeServerGPUs func() []string
}

// Events are reported on claims whose daemon had trouble.
type Events interface {
	// DaemonRestarted: the claim's daemon died and a new one was created;
	// the claim's clients lost their server.
	DaemonRestarted(c *plan.Claim, reason string)
	// DaemonRecovered: the new daemon is ready.
	DaemonRecovered(c *plan.Claim)
}

// user is one claim's use of a daemon (a GPU's, or the node server).
type user struct {
	claim   plan.Claim
	hardMiB int64
	// namespace and threads are the claim's MPS v3 namespace and its
	// active thread percentage (100 when the claim sets none).
	namespace string
	threads   int32
}

// users map claim UIDs to their use of one daemon.
type users = map[types.UID]user

// Manager implements preparer.MPS.
type Manager struct {
	cfg   Config
	locks keymutex.KeyMutex // per daemon: one daemon change at a time

	// Daemons are keyed by mpslayout.Binding.DaemonKey: a GPU's UUID for
	// a per-GPU daemon, mpslayout.NodeServerKey for the node server.
	mu    sync.Mutex
	users map[string]users // daemon key → claim → use
	// restarted are daemons that were recreated and have not been seen
	// ready since; only the reconcile loop touches it.
	restarted map[string]bool
	// ready is, per daemon, whether it passed its health check when last
	// seen (ready.go), under mu.
	ready map[string]bool
	// logOffsets: how far each daemon's control.log was scanned for
	// terminated clients, and report (WatchTerminations) who hears of
	// them, under scanMu.
	scanMu     sync.Mutex
	logOffsets map[string]int64
	report     func(incident.MPSEvent)
	// lister is the watch's cache while Run watches.
	lister atomic.Pointer[podLister]
	// beforeCollect, in tests, runs between reconcile's decision that a
	// daemon looks unused and its removal.
	beforeCollect func(key string)
}

// NewManager validates cfg.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.NodeName == "" || cfg.Template == "" || cfg.Image == "" || cfg.DriverRoot == "" {
		return nil, errors.New("the MPS manager needs a client, namespace, node name, template, image and driver root")
	}
	if !filepath.IsAbs(cfg.DriverRoot) {
		return nil, fmt.Errorf("MPS daemon driver root %q: must be an absolute host path (the chart's nvidiaDriverRoot)", cfg.DriverRoot)
	}
	limits, err := cfg.DefaultNamespaceLimits.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.DefaultNamespaceLimits = limits
	if cfg.Version != domain.MPSVersionV3 && cfg.Version != domain.MPSVersionLegacy {
		return nil, fmt.Errorf("MPS version %q: this node has no usable MPS", cfg.Version)
	}
	if cfg.Version == domain.MPSVersionV3 {
		if _, err := DaemonTOML(cfg.DriverVersion, mpslayout.ServerName, "GPU-check"); err != nil {
			return nil, err
		}
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	return &Manager{cfg: cfg, locks: keymutex.NewHashed(0), users: map[string]users{}, restarted: map[string]bool{}, ready: map[string]bool{}, logOffsets: map[string]int64{}}, nil
}

// useOf is what a claim asks of the daemon key names: the sum of its
// SMSharing shares' hard limits on a GPU (the largest such sum over the
// GPUs of a node server: a namespace's pinned memory limit binds each
// device, and the dmem cgroup holds each GPU's share to its own limit),
// its namespace and thread percentage. A TimeSlicing claim (MPS v3 nodes
// with per-cgroup limits) asks only that the daemon runs: it has no
// namespace.
func useOf(c *plan.Claim, key string) user {
	u := user{claim: *c, threads: 100}
	sums := map[string]int64{}
	for _, d := range c.Devices {
		if d.MPS != nil && d.MPS.DaemonKey() == key && (d.MPS.Namespace != "" || d.MPS.Version != domain.MPSVersionV3) {
			sums[d.GPU.UUID] += d.HardLimitBytes
			u.namespace = d.MPS.Namespace
			if d.ActiveThreadPercentage != nil {
				u.threads = *d.ActiveThreadPercentage
			}
		}
	}
	for _, sum := range sums {
		u.hardMiB = max(u.hardMiB, sum>>20)
	}
	return u
}

// servedGPUs are the GPUs of the daemon b reaches.
func servedGPUs(b mpslayout.Binding) []string {
	if len(b.ServerGPUs) > 0 {
		return b.ServerGPUs
	}
	return []string{b.GPUUUID}
}

// daemonName names the daemon key names, for messages.
func daemonName(key string) string {
	if key == mpslayout.NodeServerKey {
		return "the node server"
	}
	return "GPU " + key
}

// Acquire implements preparer.MPS: the GPU's daemon runs and is ready, and
// its ceiling covers this claim, before it returns.
func (m *Manager) Acquire(ctx context.Context, b mpslayout.Binding, c *plan.Claim) error {
	key := b.DaemonKey()
	m.locks.LockKey(key)
	defer func() { _ = m.locks.UnlockKey(key) }()

	m.mu.Lock()
	if err := m.conflict(b); err != nil {
		m.mu.Unlock()
		return err
	}
	_, had := m.users[key][c.UID]
	m.mu.Unlock()
	var read *podRead
	if !had {
		// A node server started over other GPUs than this binding's is
		// restarted if nothing holds it, or refuses GPUs it does not serve.
		var err error
		if read, err = m.checkServerSet(ctx, b, c); err != nil {
			return err
		}
	}
	m.mu.Lock()
	if m.users[key] == nil {
		m.users[key] = users{}
	}
	m.users[key][c.UID] = useOf(c, key)
	file, content := desired(m.cfg.Version, m.users[key])
	m.mu.Unlock()

	err := m.ensure(ctx, b, file, content, read)
	if err != nil && !had {
		if ctx.Err() != nil {
			// The caller (the kubelet's Prepare deadline) gave up, not the
			// daemon: drop the claim's use but let the daemon finish
			// starting for the retry, instead of deleting and re-creating
			// it on every attempt. Garbage collection spares it for
			// ReadyTimeout after its creation.
			m.dropUser(b, c.UID)
			return err
		}
		// The daemon itself failed: leave nothing behind, neither the use
		// nor, if it was the only one, the daemon.
		if relErr := m.release(context.WithoutCancel(ctx), b, c.UID); relErr != nil {
			err = errors.Join(err, relErr)
		}
	}
	return err
}

// conflict refuses a binding whose GPU another daemon in use already
// serves: a per-GPU daemon beside the node server (or the reverse) would
// put two servers on one GPU, and eviction is per server, so neither
// could evict the other's borrowers. It happens only when the plugin's
// --mps-server-scope changed while MPS claims stayed prepared. Under mu.
func (m *Manager) conflict(b mpslayout.Binding) error {
	const why = "one GPU must have one MPS server (eviction is per server); the plugin's --mps-server-scope changed while MPS claims were prepared on this node: unprepare them (drain the node's MPS pods) and retry"
	if b.DaemonKey() == mpslayout.NodeServerKey {
		for key, us := range m.users {
			if key != mpslayout.NodeServerKey && len(us) > 0 && slices.Contains(b.ServerGPUs, key) {
				return fmt.Errorf("GPU %s still has its own MPS daemon with %d claims, and this claim's shares were planned for the node server: %s", key, len(us), why)
			}
		}
		return nil
	}
	if us := m.users[mpslayout.NodeServerKey]; len(us) > 0 {
		return fmt.Errorf("the MPS node server still serves GPU %s with %d claims, and this claim's share was planned for the GPU's own daemon: %s", b.GPUUUID, len(us), why)
	}
	return nil
}

func (m *Manager) dropUser(b mpslayout.Binding, uid types.UID) {
	key := b.DaemonKey()
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.users[key], uid)
	if len(m.users[key]) == 0 {
		delete(m.users, key)
	}
}

// ensure makes the daemon exist with the settings and waits until it is
// ready and has applied them. read is the daemon Pod as Acquire already
// read it under the key's lock (nil: not read yet), so Prepare makes one
// API call for it, not two.
func (m *Manager) ensure(ctx context.Context, b mpslayout.Binding, file, content string, read *podRead) error {
	key := b.DaemonKey()
	logger := klog.FromContext(ctx).WithValues("daemon", key, "gpus", servedGPUs(b))
	pods := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace)
	name := PodName(m.cfg.NodeName, key)
	pod, err := read.get(ctx, pods, name)
	switch {
	case apierrors.IsNotFound(err):
		pod, err = m.create(ctx, b, file, content)
		if err != nil {
			return err
		}
		logger.Info("Started MPS control daemon", "pod", klog.KObj(pod), "version", m.cfg.Version, "settings", strings.TrimSpace(content))
	case err != nil:
		return fmt.Errorf("looking up MPS daemon %s/%s: %w", m.cfg.Namespace, name, err)
	case pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return fmt.Errorf("MPS daemon %s/%s of %s is terminating or has stopped (%s); it is being replaced, retry shortly", m.cfg.Namespace, name, daemonName(key), pod.Status.Phase)
	default:
		// A running daemon picks up changed settings from its config.
		if err := writeConfig(b, file, content); err != nil {
			return err
		}
	}
	// One ReadyTimeout for the daemon to start and to apply the settings.
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	if err := m.waitReady(ctx, b, name); err != nil {
		return err
	}
	m.noteReady(key, true)
	return m.waitApplied(ctx, b, file, content)
}

func (m *Manager) create(ctx context.Context, b mpslayout.Binding, file, content string) (*corev1.Pod, error) {
	for _, dir := range []string{b.PipeDir, b.LogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating MPS directory %s: %w", dir, err)
		}
	}
	// A stale .applied from a daemon that died must not pass for the new
	// one's answer.
	_ = os.Remove(filepath.Join(ConfigDir(b), file+AppliedSuffix))
	if err := writeConfig(b, file, content); err != nil {
		return nil, err
	}
	if m.cfg.Version == domain.MPSVersionV3 {
		toml, err := DaemonTOML(m.cfg.DriverVersion, mpslayout.ServerName, servedGPUs(b)...)
		if err != nil {
			return nil, err
		}
		if err := writeConfig(b, ConfigTOMLFile, toml); err != nil {
			return nil, err
		}
	}
	key, gpus := b.DaemonKey(), servedGPUs(b)
	memory := m.gpuMemoryMiB(key, gpus)
	ledger := make([]string, len(gpus))
	for i, g := range gpus {
		ledger[i] = fmt.Sprintf("%s=%d", g, memory[g])
	}
	pod, err := Render(m.cfg.Template, DaemonParams{
		Name: PodName(m.cfg.NodeName, key), Namespace: m.cfg.Namespace, NodeName: m.cfg.NodeName,
		GPUUUID: strings.Join(gpus, ","), DaemonKey: key, GPUs: gpus,
		Image: m.cfg.Image, DriverRoot: m.cfg.DriverRoot, Version: m.cfg.Version,
		PipeDir: b.PipeDir, LogDir: b.LogDir, ShmDir: b.ShmDir, ConfigDir: ConfigDir(b),
		ServerName: mpslayout.ServerName, GPUMemoryMiB: memory[gpus[0]], GPUsMemoryMiB: strings.Join(ledger, ","),
		SafetyMemoryMiB:        m.cfg.DefaultNamespaceLimits.PinnedMemoryMiB,
		SafetyThreadPercentage: m.cfg.DefaultNamespaceLimits.ActiveThreadPercentage,
	})
	if err != nil {
		return nil, err
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationServerGPUs] = strings.Join(gpus, ",")
	created, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("creating MPS daemon %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return created, nil
}

// gpuMemoryMiB is the memory of each GPU the daemon serves: as the node's
// inventory (Config.GPUMemoryMiB) or else the claims using it know it.
func (m *Manager) gpuMemoryMiB(key string, gpus []string) map[string]int64 {
	out := map[string]int64{}
	for _, g := range gpus {
		if mib, ok := m.cfg.GPUMemoryMiB[g]; ok {
			out[g] = mib
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range m.users[key] {
		for _, d := range u.claim.Devices {
			if _, known := out[d.GPU.UUID]; !known && slices.Contains(gpus, d.GPU.UUID) {
				out[d.GPU.UUID] = int64(d.GPU.MemoryBytes >> 20)
			}
		}
	}
	return out
}

// waitReady polls the daemon Pod's Ready condition, which its startup
// probe gates on the control daemon answering, with a bounded backoff.
func (m *Manager) waitReady(ctx context.Context, b mpslayout.Binding, name string) error {
	var last *corev1.Pod
	start := time.Now()
	// A real daemon takes seconds (init container, then a startup probe
	// every second).
	ready := poll(ctx, 50*time.Millisecond, func(ctx context.Context) bool {
		pod, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = pod
		return podReady(pod)
	})
	if ready {
		return nil
	}
	state := "not found"
	if last != nil {
		state = describePod(last)
	}
	return fmt.Errorf("MPS daemon %s/%s of %s is not ready after %s (%s); last daemon log lines: %s",
		m.cfg.Namespace, name, daemonName(b.DaemonKey()), time.Since(start).Round(100*time.Millisecond), state, tailLog(b.LogDir, 5))
}

func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func describePod(pod *corev1.Pod) string {
	parts := []string{"phase " + string(pod.Status.Phase)}
	for _, cs := range pod.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("%s terminated: %s (exit %d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
		case cs.RestartCount > 0:
			parts = append(parts, fmt.Sprintf("%s restarted %d times", cs.Name, cs.RestartCount))
		}
	}
	return strings.Join(parts, ", ")
}

// tailLog returns the last lines of the control daemon's log, the first
// thing anyone debugging a daemon that will not start needs.
func tailLog(dir string, n int) string {
	raw, err := os.ReadFile(filepath.Join(dir, "control.log"))
	if err != nil || len(raw) == 0 {
		return "(no control.log in " + dir + ")"
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	// Events carry this and are limited to 1024 characters.
	for i, l := range lines {
		if len(l) > 120 {
			lines[i] = l[:117] + "..."
		}
	}
	return strings.Join(lines, " | ")
}

// Release implements preparer.MPS.
func (m *Manager) Release(ctx context.Context, b mpslayout.Binding, claimUID types.UID) error {
	key := b.DaemonKey()
	m.locks.LockKey(key)
	defer func() { _ = m.locks.UnlockKey(key) }()
	return m.release(ctx, b, claimUID)
}

func (m *Manager) release(ctx context.Context, b mpslayout.Binding, claimUID types.UID) error {
	// An eviction ends the victim's container, and so its pod's claim may
	// be unprepared before the next reconcile: read the daemon's log while
	// the claim is still a user.
	key := b.DaemonKey()
	m.scanEvictions(ctx, map[string]string{key: b.LogDir})
	m.mu.Lock()
	if _, user := m.users[key][claimUID]; !user {
		// Not a user (never was, or its use was dropped when the kubelet
		// gave up): the daemon is not this claim's to stop; garbage
		// collection removes it if no claim comes for it.
		m.mu.Unlock()
		return nil
	}
	delete(m.users[key], claimUID)
	remaining := len(m.users[key])
	file, content := desired(m.cfg.Version, m.users[key])
	if remaining == 0 {
		delete(m.users, key)
	}
	m.mu.Unlock()
	if remaining > 0 {
		// Lowering the ceiling to the remaining claims (legacy), or
		// deleting the claim's namespace (v3), keeps a departed claim's
		// limit from lingering. Not awaited: nothing new depends on it.
		return writeConfig(b, file, content)
	}
	return m.stop(ctx, b)
}

// stop deletes the binding's daemon and its directories.
func (m *Manager) stop(ctx context.Context, b mpslayout.Binding) error {
	name := PodName(m.cfg.NodeName, b.DaemonKey())
	err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting MPS daemon %s/%s: %w", m.cfg.Namespace, name, err)
	}
	klog.FromContext(ctx).Info("Stopped MPS control daemon: no claims use it", "daemon", b.DaemonKey(), "pod", klog.KRef(m.cfg.Namespace, name))
	// Orphaned pipe and shm directories are a known cause of a new daemon
	// failing to start; the log stays for inspection. (The shm directory
	// is only an older plugin's: daemons now get an emptyDir.)
	for _, dir := range []string{b.PipeDir, b.ShmDir, ConfigDir(b)} {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing MPS directory %s: %w", dir, err)
		}
	}
	return nil
}

// Users returns how many claims use each daemon, by its key (a GPU's UUID,
// or mpslayout.NodeServerKey).
func (m *Manager) Users() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for gpu, us := range m.users {
		out[gpu] = len(us)
	}
	return out
}

// Restore rebuilds the reference counts from the prepared claims (the
// checkpoint) and then reconciles the daemons with them.
func (m *Manager) Restore(ctx context.Context, prepared []plan.Claim) error {
	m.mu.Lock()
	for i := range prepared {
		c := &prepared[i]
		if b := c.MPS(); b != nil {
			key := b.DaemonKey()
			if m.users[key] == nil {
				m.users[key] = users{}
			}
			m.users[key][c.UID] = useOf(c, key)
		}
	}
	m.mu.Unlock()
	err := m.reconcile(ctx)
	m.reportServerSet(ctx)
	return err
}
