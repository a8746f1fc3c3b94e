// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/node/fractionmetrics"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Every scenario is scraped once a minute from a fixed instant, so that
// two builds of one scenario are the same text.
var (
	interval = time.Minute
	start    = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
)

const gib = int64(1) << 30

// world is two simulated dmem nodes, gpu-node-a with two H200s and
// gpu-node-b with two H100s, under a temporary directory.
type world struct {
	dir string
	// ctx logs nothing below errors: the Emitter logs each incident, and
	// scenarios make many on purpose.
	ctx   context.Context
	now   time.Time
	nodes []*node
}

func newWorld(ctx context.Context) (*world, error) {
	dir, err := os.MkdirTemp("", "promscenario-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	w := &world{dir: dir, now: start, ctx: klog.NewContext(ctx, klog.FromContext(ctx).V(100))}
	for _, spec := range []struct{ name, gpus string }{{"gpu-node-a", "h200x2"}, {"gpu-node-b", "h100x2"}} {
		n, err := newNode(ctx, filepath.Join(dir, spec.name), spec.name, spec.gpus)
		if err != nil {
			w.close()
			return nil, err
		}
		w.nodes = append(w.nodes, n)
	}
	return w, nil
}

func (w *world) close() { _ = os.RemoveAll(w.dir) }

// node is one kubelet plugin's view: its prepared claims, the hook's
// container records, what NVML says each container's cgroup uses, and the
// plugin's real collector and incident path.
type node struct {
	name      string
	inv       *domain.Inventory
	srv       *server.Server
	recordDir string
	cgroupDir string
	procRoot  string
	// procs are the containers' processes, one each, by host PID.
	procs      map[uint32]process
	prepared   []plan.Claim
	limits     map[string]nvml.MemoryLimits_v1 // cgroup → the hook's limits
	used       map[string]uint64               // cgroup → bytes in use
	unhealthy  map[string]string
	daemonDown map[string]bool // GPU UUID → its MPS daemon fails its check
	quarantine int

	collector *fractionmetrics.Collector
	registry  *prometheus.Registry
	detector  *incident.Detector
	emitter   *incident.Emitter
	source    incident.NVMLSource
}

func newNode(ctx context.Context, dir, name, spec string) (*node, error) {
	inv, err := catalog.Inventory(spec, name, domain.EnforcementDMem)
	if err != nil {
		return nil, err
	}
	srv, err := gpusim.New(spec, name)
	if err != nil {
		return nil, err
	}
	n := &node{name: name, inv: inv, srv: srv, recordDir: filepath.Join(dir, "containers"), cgroupDir: filepath.Join(dir, "cgroup"),
		procRoot: filepath.Join(dir, "proc"), procs: map[uint32]process{},
		limits: map[string]nvml.MemoryLimits_v1{}, used: map[string]uint64{}, unhealthy: map[string]string{}, daemonDown: map[string]bool{}}
	for _, d := range srv.Devices {
		n.answerProcesses(d.(*server.Device))
		// NVML's per-cgroup accounting on a dmem node: the limits the hook
		// set, and the use, never above the hard limit (the driver refuses
		// the allocation that would cross it); a cgroup without limits is
		// NOT_FOUND.
		d.(*server.Device).GetMemoryLimits_v1Func = func(cgroup string) (nvml.MemoryLimits_v1, nvml.Return) {
			lim, ok := n.limits[cgroup]
			if !ok {
				return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
			}
			lim.CurrentUsed = min(n.used[cgroup], lim.HardLimit)
			return lim, nvml.SUCCESS
		}
	}
	n.collector = fractionmetrics.New(fractionmetrics.Config{
		NodeName: name, Inventory: inv, Prepared: func() []plan.Claim { return n.prepared },
		RecordDir: n.recordDir, NVML: srv, Quarantined: func() int { return n.quarantine },
		ProcRoot: n.procRoot, CgroupRoot: n.cgroupDir,
		MPSDaemons: n.mpsUsers, MPSReady: n.mpsReady, Unhealthy: func() map[string]string { return n.unhealthy },
	})
	counter := incident.NewCounter()
	uuids := make([]string, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	incident.StartAtZero(counter, name, uuids) // as the plugin's watchIncidents does
	n.registry = prometheus.NewRegistry()
	if err := n.registry.Register(n.collector); err != nil {
		return nil, fmt.Errorf("registering the fraction metrics: %w", err)
	}
	if err := n.registry.Register(counter); err != nil {
		return nil, fmt.Errorf("registering the incident counter: %w", err)
	}
	n.detector = incident.NewDetector()
	n.emitter = &incident.Emitter{Counter: counter, Shares: n.collector}
	n.source = incident.NVMLSource{NVML: srv, RecordDir: n.recordDir, Prepared: func() []plan.Claim { return n.prepared }}
	return n, nil
}

// mpsUsers counts, per GPU, the claims its MPS daemon serves: the SMSharing
// claims (as the plugin's daemon manager counts them).
func (n *node) mpsUsers() map[string]int {
	out := map[string]int{}
	for _, c := range n.prepared {
		seen := map[string]bool{}
		for _, d := range c.Devices {
			if d.ComputeMode == v1alpha1.SMSharing && !seen[d.GPU.UUID] {
				seen[d.GPU.UUID] = true
				out[d.GPU.UUID]++
			}
		}
	}
	return out
}

// mpsReady is the daemon manager's last seen readiness of every daemon
// claims need.
func (n *node) mpsReady() map[string]bool {
	out := map[string]bool{}
	for gpu := range n.mpsUsers() {
		out[gpu] = !n.daemonDown[gpu]
	}
	return out
}

// share describes a claim for prepare: one share of GPU gpu.
type share struct {
	namespace, name string
	gpu             int
	request, limit  int64
	mode            v1alpha1.ComputeMode
	containers      []string
}

// uidOf is a claim's UID, UUID-shaped and the same in every build.
func uidOf(namespace, name string) types.UID {
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace + "/" + name))
	s := h.Sum64()
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(s>>32), uint16(s>>16), uint16(s)&0xfff, uint16(s>>4)&0xfff, s&0xffffffffffff))
}

// prepare prepares the claim (its Prepare taking took) and starts its
// containers: the hook's record of each, with its cgroup and limits.
func (n *node) prepare(s share, took time.Duration) error {
	gpu := n.inv.GPUs[s.gpu]
	uid := uidOf(s.namespace, s.name)
	c := plan.Claim{UID: uid, Namespace: s.namespace, Name: s.name, Devices: []plan.Device{{
		Request: "gpu", Pool: n.name, Device: domain.DeviceName(gpu.Index), ShareID: ptr.To(types.UID(string(uid)[:8] + "-share")),
		GPU: gpu, SoftLimitBytes: s.request, HardLimitBytes: s.limit, ComputeMode: s.mode, Enforcement: domain.EnforcementDMem,
	}}}
	for _, ctr := range s.containers {
		cgroup := filepath.Join(n.cgroupDir, "kubepods", string(uid), ctr)
		if err := os.MkdirAll(cgroup, 0o755); err != nil {
			return fmt.Errorf("container cgroup: %w", err)
		}
		r := record.Record{ClaimUID: string(uid), Namespace: s.namespace, Pod: s.name + "-0", Container: ctr, Cgroup: cgroup, GPUs: []string{gpu.UUID}}
		raw, err := json.Marshal(r)
		if err != nil {
			return err
		}
		path := record.Path(n.recordDir, string(uid), ctr)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("container record: %w", err)
		}
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			return fmt.Errorf("container record: %w", err)
		}
		n.limits[cgroup] = nvml.MemoryLimits_v1{SoftLimit: uint64(s.request), HardLimit: uint64(s.limit)}
		if err := n.startProcess(gpu.UUID, uid, ctr); err != nil {
			return err
		}
	}
	n.prepared = append(n.prepared, c)
	n.collector.ObservePrepare(took, "")
	return nil
}

// cgroupOf is a container's cgroup.
func (n *node) cgroupOf(namespace, name, container string) string {
	return filepath.Join(n.cgroupDir, "kubepods", string(uidOf(namespace, name)), container)
}

// use sets what a container holds now.
func (n *node) use(namespace, name, container string, bytes int64) {
	n.used[n.cgroupOf(namespace, name, container)] = uint64(max(bytes, 0))
}

// unprepare ends the claim's containers and unprepares it; the pruner
// removes what the hook recorded.
func (n *node) unprepare(namespace, name string, took time.Duration) error {
	uid := uidOf(namespace, name)
	n.prepared = slicesDeleteClaim(n.prepared, uid)
	n.stopProcesses(uid)
	if err := os.RemoveAll(filepath.Join(n.cgroupDir, "kubepods", string(uid))); err != nil {
		return fmt.Errorf("container cgroups: %w", err)
	}
	n.collector.ObserveUnprepare(took, uid, nil)
	if _, err := n.collector.PruneRecords(); err != nil {
		return fmt.Errorf("pruning records: %w", err)
	}
	return nil
}

func slicesDeleteClaim(claims []plan.Claim, uid types.UID) []plan.Claim {
	out := claims[:0]
	for _, c := range claims {
		if c.UID != uid {
			out = append(out, c)
		}
	}
	return out
}

// failPrepare is a Prepare that failed for reason.
func (n *node) failPrepare(reason string, took time.Duration) {
	n.collector.ObservePrepare(took, reason)
}

// evict is the MPS server terminating the claim's client for using more
// than its request (as the daemon's log reports it): the incident goes
// through FromMPS and the Emitter, and the container's memory is freed.
func (n *node) evict(ctx context.Context, now time.Time, namespace, name, container string) {
	uid := uidOf(namespace, name)
	for _, c := range n.prepared {
		if c.UID != uid {
			continue
		}
		ev := incident.MPSEvent{GPUUUID: c.Devices[0].GPU.UUID, ClaimUID: uid, Evicted: true, Time: now,
			Container: incident.Container{Namespace: namespace, Pod: name + "-0", Container: container}}
		if inc, ok := incident.FromMPS(n.name, ev, n.prepared, nil); ok {
			n.emitter.Emit(ctx, inc)
		}
	}
	n.use(namespace, name, container, 0)
}

// observe is one pass of the plugin's incident loop.
func (n *node) observe(ctx context.Context, now time.Time) {
	for _, inc := range n.detector.Observe(n.name, n.source.Samples(now)) {
		n.emitter.Emit(ctx, inc)
	}
}

// text is the plugin's scrape.
func (n *node) text() ([]byte, error) { return expose(n.registry) }

// expose writes what a registry's /metrics serves, in the text format.
func expose(g prometheus.Gatherer) ([]byte, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering: %w", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", f.GetName(), err)
		}
	}
	return buf.Bytes(), nil
}

// scrape runs the plugins' incident pass and scrapes every target.
func (w *world) scrape(ctx context.Context) ([]Target, error) {
	var out []Target
	for _, n := range w.nodes {
		n.observe(w.ctx, w.now)
		text, err := n.text()
		if err != nil {
			return nil, fmt.Errorf("plugin of %s: %w", n.name, err)
		}
		out = append(out, Target{Job: JobPlugin, Text: text})
	}
	text, err := w.controllerText(ctx)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	return append(out, Target{Job: JobController, Text: text}), nil
}
