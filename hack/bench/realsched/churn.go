// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// churnResult is one churn phase (-churn N): the workload placed as the
// steady population, then N events that each replace a running pod.
type churnResult struct {
	Packing    string  `json:"packing"`
	Round      int     `json:"round,omitempty"`
	First      bool    `json:"first"`
	Nodes      int     `json:"nodes"`
	GPUs       string  `json:"gpus"`
	Population int     `json:"population"`
	Events     int     `json:"events"`
	Rate       float64 `json:"rate"`
	// InitialRatio is GPUs holding a share over the live lower bound when
	// the first event starts; Mean, P95 and Max cover the events (time
	// weighted); Settled is once the scheduler placed what it could after
	// the last event.
	InitialRatio      float64 `json:"initialRatio"`
	MeanRatio         float64 `json:"meanRatio"`
	P95Ratio          float64 `json:"p95Ratio"`
	MaxRatio          float64 `json:"maxRatio"`
	SettledRatio      float64 `json:"settledRatio"`
	SettledGPUs       int     `json:"settledGPUs"`
	SettledLowerBound int     `json:"settledLowerBound"`
	// PendingWithRoom counts pods Pending longer than 10 s at a sample
	// where some GPU had at least their request free; LongestWithRoom is
	// the longest of their waits.
	PendingWithRoom        int     `json:"pendingWithRoom"`
	LongestWithRoomSeconds float64 `json:"longestWithRoomSeconds"`
	// Scheduled pods were bound between the first event and the settled
	// sample, Seconds apart.
	Scheduled     int     `json:"scheduled"`
	Seconds       float64 `json:"seconds"`
	PodsPerSecond float64 `json:"podsPerSecond"`
	// BindSeconds are the event pods' create-to-bind latencies; MaxEventLag
	// is how late the benchmark issued an event (a backlog on its side).
	BindSecondsP50     float64 `json:"bindSecondsP50"`
	BindSecondsP95     float64 `json:"bindSecondsP95"`
	MaxEventLagSeconds float64 `json:"maxEventLagSeconds"`
	cpuFigures
	Samples []churnSample `json:"samples"`
}

// cpuFigures are what the processes spent over a measured span.
type cpuFigures struct {
	// CPUSeconds by process: etcd, kube-apiserver, kube-scheduler,
	// kube-controller-manager and realsched (this process: the
	// benchmark's client and, when packing runs, gpufrac-controller in
	// process).
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	// CPUPerPod is kube-apiserver + kube-scheduler + realsched over the
	// pods scheduled, in CPU-seconds.
	CPUPerPod float64 `json:"cpuPerPod,omitempty"`
	// LoadAverage is the machine's 1-minute load average at the end.
	LoadAverage float64 `json:"loadAverage,omitempty"`
}

// costProcesses are the processes whose CPU CPUPerPod adds: the ones the
// mechanism runs in (the API server's admission, the scheduler's scoring,
// the controller).
var costProcesses = []string{"kube-apiserver", "kube-scheduler", benchProcess}

const benchProcess = "realsched"

// cpuSpent turns two harness readings into cpuFigures for pods pods.
func cpuSpent(before, after map[string]float64, pods int) cpuFigures {
	f := cpuFigures{CPUSeconds: map[string]float64{}, LoadAverage: loadAverage()}
	for name, v := range after {
		key := name
		if name == harness.SelfProcess {
			key = benchProcess
		}
		f.CPUSeconds[key] = round3(v - before[name])
	}
	if pods > 0 {
		var sum float64
		for _, p := range costProcesses {
			sum += f.CPUSeconds[p]
		}
		f.CPUPerPod = sum / float64(pods)
	}
	return f
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// loadAverage is the first field of /proc/loadavg, 0 where unreadable.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(raw) + " 0")[0], 64)
	return v
}

// runChurn runs the churn phases: cfg.packing alone, or with compare off
// and on alternating for cfg.rounds rounds on one cluster.
func runChurn(ctx context.Context, cfg config) (_ []*churnResult, finalErr error) {
	b, closeBench, err := setUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { closeBench(finalErr) }()
	if cfg.packing != compare {
		res, err := b.churnPhase(ctx, cfg.packing, 0)
		if err != nil {
			return nil, err
		}
		res.First = true
		return []*churnResult{res}, ctx.Err()
	}
	var all []*churnResult
	for round := 1; round <= cfg.rounds; round++ {
		modes := roundModes(round, cfg.against)
		for i, mode := range modes {
			res, err := b.churnPhase(ctx, mode, round)
			if err != nil {
				return all, err
			}
			res.First = i == 0
			all = append(all, res)
			fmt.Fprintf(os.Stderr, "realsched: round %d, churn %s: mean %.2f p95 %.2f max %.2f settled %.2f, %d pending with room, %.1f pods/s, %.2f ms CPU a pod\n",
				round, mode, res.MeanRatio, res.P95Ratio, res.MaxRatio, res.SettledRatio, res.PendingWithRoom, res.PodsPerSecond, 1000*res.CPUPerPod)
			if round == cfg.rounds && i == len(modes)-1 {
				break // the cluster goes with the run
			}
			if err := b.reset(ctx, mode); err != nil {
				return all, err
			}
		}
	}
	return all, ctx.Err()
}

// startMode starts what packing mode needs (nothing for off); the
// returned function stops it.
func (b *bench) startMode(ctx context.Context, mode string) (func(), error) {
	if mode == "off" || b.cfg.extenderDown {
		return func() {}, nil
	}
	var ctrl *harness.Controller
	var err error
	switch mode {
	case "extender":
		ctrl, err = b.cp.StartExtender(ctx, b.extenderAddr)
	case "webhook":
		ctrl, err = b.cp.StartPacking(ctx, namespace, harness.PackingOptions{NoPolicy: true})
	default:
		ctrl, err = b.cp.StartPacking(ctx, namespace, harness.PackingOptions{PolicyTemplate: b.fractionTemplate()})
	}
	if err != nil {
		return nil, err
	}
	return func() {
		if err := ctrl.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "realsched: stopping gpufrac-controller:", err)
		}
	}, nil
}

// gpuCapacity lists every GPU of the cluster's slices with its memory.
func (b *bench) gpuCapacity(ctx context.Context) (map[string]int64, int64, error) {
	list, err := b.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	out := map[string]int64{}
	var most int64
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if c, ok := d.Capacity["memory"]; ok {
				out[s.Spec.Pool.Name+"/"+d.Name] = c.Value.Value()
				most = max(most, c.Value.Value())
			}
		}
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("no device with a memory capacity in %d ResourceSlices", len(list.Items))
	}
	return out, most, nil
}

// churnPhase places the workload with packing mode, then runs the events
// and samples the cluster until it settles. It leaves the pods in place.
func (b *bench) churnPhase(ctx context.Context, mode string, round int) (*churnResult, error) {
	stop, err := b.startMode(ctx, mode)
	if err != nil {
		return nil, err
	}
	defer stop()
	capacity, gpuMemory, err := b.gpuCapacity(ctx)
	if err != nil {
		return nil, err
	}
	tr := newChurnTracker(b, capacity, gpuMemory)
	trackCtx, stopTrack := context.WithCancel(ctx)
	defer stopTrack()
	if err := tr.start(trackCtx); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "realsched: churn %s: placing %d pods\n", mode, len(b.wl.pods))
	if err := createPods(ctx, b.client, b.wl.pods, 32); err != nil {
		return nil, err
	}
	tr.waitPlaced(ctx, len(b.wl.pods), b.cfg.settle)
	cfg := b.cfg
	events := churnEvents(cfg.churn, cfg.rate, len(b.wl.pods), cfg.seed, round)
	res := &churnResult{Packing: mode, Round: round, Nodes: cfg.nodes, GPUs: cfg.gpus, Population: len(b.wl.pods), Events: len(events), Rate: cfg.rate}
	cpuBefore, err := b.cp.CPUSeconds()
	if err != nil {
		return nil, err
	}
	first := time.Now()
	initial := tr.sample(first, first)
	res.InitialRatio = initial.ratio()
	stopSampling := b.sampleEvery(tr, first, initial)
	lag, runErr := b.runEvents(ctx, tr, events, first)
	res.MaxEventLagSeconds = lag.Seconds()
	tr.waitPlaced(ctx, len(b.wl.pods), cfg.settle)
	end := time.Now()
	all := stopSampling()
	settled := tr.sample(end, first)
	all = append(all, settled)
	cpuAfter, err := b.cp.CPUSeconds()
	if err := errors.Join(runErr, err, ctx.Err()); err != nil {
		return nil, err
	}
	res.Samples = all
	res.MeanRatio, res.P95Ratio, res.MaxRatio = ratioStats(all)
	res.SettledRatio, res.SettledGPUs, res.SettledLowerBound = settled.ratio(), settled.GPUs, settled.LowerBound
	var latencies []float64
	res.Scheduled, latencies, res.PendingWithRoom, res.LongestWithRoomSeconds = tr.binds(first, end)
	res.BindSecondsP50, res.BindSecondsP95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
	res.Seconds = end.Sub(first).Seconds()
	if res.Seconds > 0 {
		res.PodsPerSecond = float64(res.Scheduled) / res.Seconds
	}
	res.cpuFigures = cpuSpent(cpuBefore, cpuAfter, res.Scheduled)
	return res, nil
}

// sampleEvery samples the cluster every cfg.sample from now on, after
// initial; the returned function ends it and returns the samples.
func (b *bench) sampleEvery(tr *churnTracker, first time.Time, initial churnSample) func() []churnSample {
	var mu sync.Mutex
	out := []churnSample{initial}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(b.cfg.sample)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				s := tr.sample(now, first)
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
		}
	}()
	return func() []churnSample {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// runEvents issues the events at their times (each a delete and a
// create, in flight together up to a bound) and returns how late the
// latest was issued.
func (b *bench) runEvents(ctx context.Context, tr *churnTracker, events []churnEvent, first time.Time) (time.Duration, error) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var lag time.Duration
	grace := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	for i, ev := range events {
		select {
		case <-ctx.Done():
			wg.Wait()
			return lag, ctx.Err()
		case <-time.After(time.Until(first.Add(ev.At))):
		}
		lag = max(lag, time.Since(first.Add(ev.At)))
		victim := tr.pickRunning(ev.Depart)
		pod := b.wl.pods[ev.Arrive].DeepCopy()
		pod.Name = fmt.Sprintf("churn-%05d", i)
		pod.Namespace = namespace
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			if victim != "" {
				err = b.client.CoreV1().Pods(namespace).Delete(ctx, victim, grace)
			}
			tr.creating(pod.Name)
			if _, cerr := b.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); cerr != nil {
				err = errors.Join(err, fmt.Errorf("creating pod %s: %w", pod.Name, cerr))
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lag, errors.Join(errs...)
}

// printChurn runs the churn phases and prints them: JSON lines (a phase
// each, with its samples, then a summary of a comparison), or a table.
func printChurn(ctx context.Context, cfg config, output string) error {
	results, err := runChurn(ctx, cfg)
	for _, r := range results {
		if output == "json" {
			out, _ := json.Marshal(r)
			fmt.Println(string(out))
			continue
		}
		fmt.Printf("churn %-3s round %d%s  nodes %4d  %d pods, %d events at %.0f/s  GPUs / live lower bound: initial %.2f  mean %.2f  p95 %.2f  max %.2f  settled %.2f (%d/%d)  pending >10 s with room %d (longest %.1f s)  %.1f pods/s  bind p50 %.2f s p95 %.2f s  CPU %.2f ms a pod (load %.1f)\n",
			r.Packing, r.Round, map[bool]string{true: " first", false: ""}[r.First], r.Nodes, r.Population, r.Events, r.Rate,
			r.InitialRatio, r.MeanRatio, r.P95Ratio, r.MaxRatio, r.SettledRatio, r.SettledGPUs, r.SettledLowerBound,
			r.PendingWithRoom, r.LongestWithRoomSeconds, r.PodsPerSecond, r.BindSecondsP50, r.BindSecondsP95, 1000*r.CPUPerPod, r.LoadAverage)
	}
	if err != nil || cfg.packing != compare {
		return err
	}
	sum := summarizeChurn(results)
	if output == "json" {
		out, _ := json.Marshal(sum)
		fmt.Println(string(out))
		return nil
	}
	fmt.Printf("churn on / off by round: mean ratio %v, CPU a pod %v\n", sum.MeanRatios, sum.CPURatios)
	return nil
}

// churnSummary pairs a churn comparison's rounds: per round, on's figure
// over off's.
type churnSummary struct {
	Packing    string    `json:"packing"`
	Nodes      int       `json:"nodes"`
	Population int       `json:"population"`
	Events     int       `json:"events"`
	MeanRatios []float64 `json:"meanRatios"`
	CPURatios  []float64 `json:"cpuRatios"`
}

func summarizeChurn(results []*churnResult) *churnSummary {
	s := &churnSummary{Packing: "churn-" + compare}
	byRound := map[int]map[string]*churnResult{}
	var rounds []int
	for _, r := range results {
		s.Nodes, s.Population, s.Events = r.Nodes, r.Population, r.Events
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]*churnResult{}
			rounds = append(rounds, r.Round)
		}
		mode := "on"
		if r.Packing == "off" {
			mode = "off"
		}
		byRound[r.Round][mode] = r
	}
	for _, round := range rounds {
		off, on := byRound[round]["off"], byRound[round]["on"]
		if off == nil || on == nil || off.MeanRatio == 0 || off.CPUPerPod == 0 {
			continue
		}
		s.MeanRatios = append(s.MeanRatios, round3(on.MeanRatio/off.MeanRatio))
		s.CPURatios = append(s.CPURatios, round3(on.CPUPerPod/off.CPUPerPod))
	}
	return s
}
