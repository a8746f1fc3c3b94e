// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command realsched measures packing in the real kube-scheduler: it starts
// the harness control plane (etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager v1.37.2, client QPS lifted so the API rate limit
// is not what is measured), N nodes that carry the ResourceSlices
// gpufrac-kubelet-plugin --simulate-gpus publishes (no kubelet: pods are
// bound, never run), the demo's DeviceClasses and, with -packing=on, the
// packing webhook as the chart registers it; applies the workload; waits
// until the scheduler has placed what it can; and prints what it did.
// -packing=compare does that off and on in turn on the one cluster, and
// prints on's pods per second over off's per round.
//
//	go run ./hack/bench/realsched -f WORKLOAD.yaml -nodes 64 -gpus h200x8 -packing=on -o json
//	go run ./hack/bench/realsched -trace 400 -seed 1 -nodes 64 -packing=off
//	go run ./hack/bench/realsched -trace 400 -nodes 64 -packing=compare -rounds 6
//	go run ./hack/bench/realsched -trace 400 -nodes 64 -packing=extender
//	go run ./hack/bench/realsched -trace 400 -nodes 64 -scheduler-config hack/bench/realsched/testdata/scheduler-pct10.yaml
//	go run ./hack/bench/realsched -trace 400 -nodes 64 -packing compare -churn 800 -rate 10 -o json
//
// -churn N (churn.go) places the workload as a steady population, then
// replaces N running pods in a seeded Poisson process and samples GPUs in
// use against the live lower bound (docs/packing.md). Every phase reports
// the CPU-seconds per scheduled pod of the API server, the scheduler and
// this process (gpufrac-controller runs in it).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

// result is the benchmark's output.
type result struct {
	Packing string `json:"packing"`
	// Round is the round of a comparison (-packing compare), 0 otherwise.
	Round  int    `json:"round,omitempty"`
	Nodes  int    `json:"nodes"`
	GPUs   string `json:"gpus"`
	Placed int    `json:"placed"`
	Total  int    `json:"total"`
	// GPUsUsed are distinct GPUs holding at least one allocated claim.
	GPUsUsed int `json:"gpusUsed"`
	// LowerBound is ceil(memory the placed pods' claims consumed / GPU
	// memory): the fewest GPUs that could hold what was placed.
	LowerBound int `json:"lowerBound"`
	NodesUsed  int `json:"nodesUsed"`
	// Seconds from the first pod's create to the last bind; PodsPerSecond
	// is Placed over it.
	Seconds       float64 `json:"seconds"`
	PodsPerSecond float64 `json:"podsPerSecond"`
	// SteadyPodsPerSecond is the bind rate from the 10th to the 90th
	// percentile bind.
	SteadyPodsPerSecond float64 `json:"steadyPodsPerSecond"`
	// CreateSeconds is how long creating the pods took (admission, the
	// packing webhook included).
	CreateSeconds float64 `json:"createSeconds"`
	// WebhookCalls and PolicyMutations count the phase's pods kube-apiserver
	// sent to the packing webhook and packed with the packing policy.
	WebhookCalls    int `json:"webhookCalls"`
	PolicyMutations int `json:"policyMutations"`
	cpuFigures
}

func main() {
	file := flag.String("f", "", "workload: ResourceClaimTemplates, DeviceClasses and Pods in YAML")
	trace := flag.Int("trace", 0, "instead of -f: this many inference pods of the packing benchmark's trace (docs/benchmarks.md)")
	seed := flag.Uint64("seed", 1, "trace seed (with -trace)")
	nodes := flag.Int("nodes", 8, "nodes")
	gpus := flag.String("gpus", "h200x8", "GPUs per node, as --simulate-gpus takes them")
	packing := flag.String("packing", "on", "on: the chart's packing policy, webhook and node labels; webhook: the same without the policy (a chart with controller.packing.admissionPolicy=false); extender: gpufrac-controller's scheduler extender (--extender-address) alone, named in the scheduler's configuration; off: the scheduler alone; compare: off and on in turn on one cluster, -rounds times, with on's pods per second over off's per round")
	against := flag.String("against", "on", "with -packing compare: the mode measured against off, on or webhook")
	rounds := flag.Int("rounds", 3, "with -packing compare: rounds of off and on (odd rounds run off first, even ones on first)")
	output := flag.String("o", "table", "json or table")
	qps := flag.Int("qps", 1000, "client QPS of kube-scheduler, kube-controller-manager and the benchmark (burst is twice it)")
	timeout := flag.Duration("timeout", 20*time.Minute, "give up after this long")
	settle := flag.Duration("settle", 5*time.Second, "placement is done when nothing changed for this long and every pod is bound or unschedulable")
	extenderDown := flag.Bool("extender-down", false, "with -packing=extender: configure the scheduler with the extender but never start gpufrac-controller (a dead controller must not block scheduling)")
	optOut := flag.Bool("opt-out", false, "annotate every pod gpufrac.dev/packing: \"false\": with -packing=on, what the controller, its webhook calls and its labels cost the scheduler without packing anything")
	var schedulerFlags stringList
	flag.Var(&schedulerFlags, "scheduler-flag", "extra kube-scheduler flag, repeatable (e.g. --authorization-always-allow-paths=/healthz,/debug/pprof/profile to profile it)")
	var apiserverFlags stringList
	flag.Var(&apiserverFlags, "apiserver-flag", "extra kube-apiserver flag, repeatable (e.g. --profiling=true to read its /debug/pprof/profile with the harness's admin kubeconfig)")
	schedulerConfig := flag.String("scheduler-config", "", "a KubeSchedulerConfiguration file kube-scheduler runs with (--config); the harness fills in clientConnection.kubeconfig, and qps/burst from -qps unless the file sets them")
	schedulerBinary := flag.String("kube-scheduler", "", "run this kube-scheduler binary instead of the one built from the module proxy (the same release, patched: docs/packing.md)")
	churn := flag.Int("churn", 0, "after placing the workload, run this many churn events, each deleting a random running pod and creating one drawn from the workload, at -rate a second (a seeded Poisson process), sampling GPUs in use against the live lower bound; with -packing compare, off and on alternate on one cluster")
	rate := flag.Float64("rate", 10, "with -churn: events a second")
	sample := flag.Duration("sample", time.Second, "with -churn: how often the cluster is sampled")
	flag.Parse()
	if *churn < 0 || (*churn > 0 && (*rate <= 0 || *sample <= 0)) {
		fmt.Fprintln(os.Stderr, "realsched: -churn, -rate and -sample must be positive")
		os.Exit(2)
	}
	if err := check(*file, *trace, *packing, *against, *output, *rounds, *extenderDown); err != nil {
		fmt.Fprintln(os.Stderr, "realsched:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var schedConfig []byte
	if *schedulerConfig != "" {
		var err error
		if schedConfig, err = os.ReadFile(*schedulerConfig); err != nil {
			fmt.Fprintln(os.Stderr, "realsched: -scheduler-config:", err)
			os.Exit(2)
		}
	}
	cfg := config{schedulerConfig: schedConfig, schedulerBinary: *schedulerBinary, file: *file, trace: *trace, seed: *seed, nodes: *nodes, gpus: *gpus,
		packing: *packing, rounds: *rounds, against: *against, extenderDown: *extenderDown, optOut: *optOut, qps: *qps, settle: *settle, schedulerFlags: schedulerFlags, apiserverFlags: apiserverFlags,
		churn: *churn, rate: *rate, sample: *sample}
	if *churn > 0 {
		if err := printChurn(ctx, cfg, *output); err != nil {
			fmt.Fprintln(os.Stderr, "realsched:", err)
			os.Exit(1)
		}
		return
	}
	if *packing == compare {
		cfg.progress = printProgress
	}
	results, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realsched:", err)
		os.Exit(1)
	}
	var summary *comparison
	if *packing == compare {
		if summary, err = compareResults(results); err != nil {
			fmt.Fprintln(os.Stderr, "realsched:", err)
			os.Exit(1)
		}
	}
	for _, res := range results {
		if *output == "json" {
			out, _ := json.Marshal(res)
			fmt.Println(string(out))
			continue
		}
		fmt.Printf("packing %-3s  nodes %4d  placed %4d/%-4d  GPUs used %4d  lower bound %4d (%.2fx)  nodes used %4d  %.1f s  %.1f pods/s (steady %.1f; created in %.1f s)  CPU %.2f ms a pod (load %.1f)\n",
			res.Packing, res.Nodes, res.Placed, res.Total, res.GPUsUsed, res.LowerBound, ratio(res.GPUsUsed, res.LowerBound),
			res.NodesUsed, res.Seconds, res.PodsPerSecond, res.SteadyPodsPerSecond, res.CreateSeconds, 1000*res.CPUPerPod, res.LoadAverage)
	}
	if summary == nil {
		return
	}
	if *output == "json" {
		out, _ := json.Marshal(summary)
		fmt.Println(string(out))
		return
	}
	fmt.Printf("pods/s on over off, same cluster, by round: %s  median %.2f  lowest %.2f\n",
		strings.Trim(fmt.Sprintf("%.2f", summary.Ratios), "[]"), summary.MedianRatio, summary.MinRatio)
	fmt.Printf("CPU-seconds a scheduled pod (API server, scheduler, controller), on over off, by round: %s  median %.2f  highest %.2f\n",
		strings.Trim(fmt.Sprintf("%.2f", summary.CPURatios), "[]"), summary.MedianCPURatio, summary.MaxCPURatio)
}

func check(file string, trace int, packing, against, output string, rounds int, extenderDown bool) error {
	switch {
	case (file == "") == (trace == 0):
		return fmt.Errorf("give either -f WORKLOAD.yaml or -trace N")
	case packing != "on" && packing != "webhook" && packing != "off" && packing != "extender" && packing != compare:
		return fmt.Errorf("-packing=%q: want on, webhook, off, extender or compare", packing)
	case against != "on" && against != "webhook":
		return fmt.Errorf("-against=%q: want on or webhook", against)
	case packing == compare && rounds < 1:
		return fmt.Errorf("-rounds=%d: want at least 1", rounds)
	case extenderDown && packing != "extender":
		return fmt.Errorf("-extender-down goes with -packing=extender only")
	case output != "json" && output != "table":
		return fmt.Errorf("-o %q: want json or table", output)
	}
	return nil
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func loadFor(cfg config, gpuMemory resource.Quantity) (*workload, error) {
	if cfg.trace > 0 {
		return traceWorkload(simulate.Generate(cfg.trace, cfg.seed, gpuMemory))
	}
	data, err := os.ReadFile(cfg.file)
	if err != nil {
		return nil, err
	}
	return loadWorkload(data, []resource.Quantity{gpuMemory})
}

type stringList []string

func (l *stringList) String() string     { return fmt.Sprint(*l) }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
