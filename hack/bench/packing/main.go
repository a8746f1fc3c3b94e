// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command packing is the packing benchmark: one seeded trace of inference
// pods on H200 nodes, placed by each strategy, printed as a table against
// the lower bound ceil(sum of requests / GPU memory).
//
//	go run ./hack/bench/packing -pods 400 -seed 1 -nodes 64 -chart docs/packing.png
//	go run ./hack/bench/packing -churn bin/realsched-churn.jsonl -churn-chart docs/packing-churn.png
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/hack/bench/packing/internal/packing"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

func main() {
	pods := flag.Int("pods", 400, "inference pods in the trace")
	seed := flag.Uint64("seed", 1, "trace seed")
	nodes := flag.Int("nodes", 64, "H200 nodes (8 GPUs each); enough for whole-GPU to fit")
	replicas := flag.Int("replicas", 4, "time-slicing replicas per GPU")
	chart := flag.String("chart", "", "also draw the table as a chart into this file (.png, .svg or .pdf)")
	realsched := flag.String("realsched", "", "JSON lines of hack/bench/realsched -o json runs of this trace; the first of each -packing mode on -nodes nodes is shown as the real scheduler's placement")
	churn := flag.String("churn", "", "instead of the comparison: JSON lines of hack/bench/realsched -churn N -o json runs, whose ratio over time is drawn into -churn-chart")
	churnChartPath := flag.String("churn-chart", "", "with -churn: the chart's file (.png, .svg or .pdf)")
	flag.Parse()
	if *churn != "" {
		if *churnChartPath == "" {
			fmt.Fprintln(os.Stderr, "packing: -churn needs -churn-chart")
			os.Exit(2)
		}
		if err := churnChart(*churn, *churnChartPath); err != nil {
			fmt.Fprintln(os.Stderr, "packing:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*pods, *seed, *nodes, *replicas, *chart, *realsched); err != nil {
		fmt.Fprintln(os.Stderr, "packing:", err)
		os.Exit(1)
	}
}

func run(n int, seed uint64, nodes, replicas int, chart, realsched string) error {
	ctx := context.Background()
	gpu := resource.MustParse("141Gi")
	gpuBytes := gpu.Value()
	trace := simulate.Generate(n, seed, gpu)
	total := nodes * 8

	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		return err
	}
	slices, err := simulate.Cluster{Nodes: nodes, GPUs: "h200x8"}.Slices(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	frac, err := packing.Gpufrac(ctx, trace, slices, classes, gpuBytes)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	// The real scheduler's choice of node, modelled (internal/cli/simulate), without
	// and with gpufrac's packing webhook; hack/bench/realsched measures it.
	off, err := packing.GpufracWith(ctx, trace, slices, classes, gpuBytes, simulate.Scheduler{Seed: seed}, "model: scheduler")
	if err != nil {
		return err
	}
	on, err := packing.GpufracWith(ctx, trace, slices, classes, gpuBytes, simulate.Scheduler{Seed: seed, Packing: true}, "model: +packing")
	if err != nil {
		return err
	}
	outcomes := []packing.Outcome{
		packing.WholeGPU(trace, total, gpuBytes),
		packing.MIG(trace, total, gpuBytes),
		packing.TimeSlicingReplicas(trace, total, replicas, gpuBytes),
		off, on,
	}
	if realsched != "" {
		measured, err := realschedOutcomes(realsched, trace, nodes, gpuBytes)
		if err != nil {
			return err
		}
		outcomes = append(outcomes, measured...)
	}
	outcomes = append(outcomes, frac)
	lb := packing.LowerBound(trace, gpuBytes)

	mix := make([]string, len(simulate.Mix))
	for i, m := range simulate.Mix {
		mix[i] = fmt.Sprintf("%s %d%%", m.Size, m.Weight)
	}
	fmt.Printf("Trace: %d inference pods, seed %d, mix %s, limits 1.5 x request; cluster %d nodes x 8 H200 (%d GPUs).\n",
		n, seed, strings.Join(mix, ", "), nodes, total)
	fmt.Printf("Lower bound: %d GPUs (sum of requests / 141Gi).\n\n", lb)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "strategy\tGPUs used\tvs lower bound\tpods placed\tmemory utilisation\tpods at risk")
	for _, o := range outcomes {
		fmt.Fprintf(w, "%s\t%d\t%+.1f%%\t%d/%d\t%.1f%%\t%d\n", o.Strategy, o.GPUsUsed,
			100*(float64(o.GPUsUsed)/float64(lb)-1), o.PodsPlaced, n, 100*o.Utilisation, o.AtRisk)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Printf("\ngpufrac uses %.2fx fewer GPUs than whole-GPU allocation; placement with the scheduler's allocator took %s (%.1f ms per pod).\n",
		float64(outcomes[0].GPUsUsed)/float64(on.GPUsUsed), elapsed.Round(time.Millisecond), float64(elapsed.Milliseconds())/float64(n))
	if chart == "" {
		return nil
	}
	title := fmt.Sprintf("%d inference pods (seed %d) on H200s: GPUs used and pods at risk", n, seed)
	if err := packing.Chart(chart, title, outcomes, lb); err != nil {
		return err
	}
	fmt.Printf("Chart written to %s.\n", chart)
	return nil
}
