// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

// newSimulateCommand places a workload on a simulated cluster with the
// scheduler's own allocator and prints where everything went.
func newSimulateCommand(streams IOStreams) *cobra.Command {
	var filenames []string
	var nodes, generate int
	var gpus, output, scheduler string
	var seed uint64
	var packing bool
	cmd := &cobra.Command{
		Use:   "simulate (-f WORKLOAD.yaml | --generate N) --nodes N --gpus h200x8 [-o json]",
		Short: "Place a workload on a simulated cluster, as the scheduler would",
		Long: "simulate builds the ResourceSlices gpufrac's kubelet plugin would publish for --nodes nodes of\n" +
			"--gpus GPUs each, and places the workload's pods in order with the scheduler's own DRA\n" +
			"allocator. The workload is Pods with ResourceClaimTemplates (a gpufrac.dev/replicas annotation\n" +
			"multiplies a pod), KAI-annotated Pods (translated as the webhook does), or --generate N\n" +
			"inference pods drawn from the benchmark's mix with --seed.\n\n" +
			"Nodes are chosen as kube-scheduler's default profile chooses them (docs/design/packing.md):\n" +
			"a rotating window of feasible nodes, least-allocated scoring that spreads pods, gpufrac's\n" +
			"packing node affinity when --packing is on, and a seeded random choice among equal scores.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := checkSimulateFlags(cmd, nodes, generate, len(filenames) > 0, output); err != nil {
				return err
			}
			// Every node has the same GPUs: the first node's slices give
			// the GPU count and sizes before the cluster is built.
			first, err := simulate.NodeSlices(ctx, simulate.NodeName(0), gpus, "")
			if err != nil {
				return err
			}
			classes, err := deployments.DeviceClassObjects()
			if err != nil {
				return err
			}
			pods, classes, err := workload(filenames, streams.In, generate, seed, first, classes)
			if err != nil {
				return err
			}
			if err := checkWork(nodes, first, pods); err != nil {
				return err
			}
			slices, err := simulate.Cluster{Nodes: nodes, GPUs: gpus}.Slices(ctx)
			if err != nil {
				return err
			}
			sched, err := schedulerFor(scheduler, seed, packing)
			if err != nil {
				return err
			}
			res, err := simulate.RunWith(ctx, slices, classes, pods, sched)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return printSimulation(streams.Out, res)
		},
	}
	cmd.Flags().StringArrayVarP(&filenames, "filename", "f", nil, "workload file or directory (- for stdin); repeatable")
	cmd.Flags().IntVar(&generate, "generate", 0, "instead of -f: this many inference pods from the benchmark's mix")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of --generate and of the scheduler's choice among equally scored nodes")
	cmd.Flags().StringVar(&scheduler, "scheduler", "kube-scheduler", "kube-scheduler: node choice as the default kube-scheduler makes it; first-fit: the first node where a pod fits")
	cmd.Flags().BoolVar(&packing, "packing", true, "with --scheduler=kube-scheduler: gpufrac's packing webhook is on (chart value controller.packing.enabled)")
	cmd.Flags().IntVar(&nodes, "nodes", 1, "number of nodes")
	cmd.Flags().StringVar(&gpus, "gpus", "h200x8", "GPUs per node, as the plugin's --simulate-gpus takes them")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for a machine-readable result")
	return cmd
}

// checkSimulateFlags refuses flags that contradict each other or name
// nothing simulate does, before any work.
func checkSimulateFlags(cmd *cobra.Command, nodes, generate int, files bool, output string) error {
	if nodes < 1 || nodes > simulate.MaxNodes {
		return fmt.Errorf("--nodes %d: must be from 1 to %d (the most nodes a Kubernetes cluster holds)", nodes, simulate.MaxNodes)
	}
	if cmd.Flags().Changed("generate") && (generate < 1 || generate > simulate.MaxPods) {
		return fmt.Errorf("--generate %d: must be from 1 to %d (the most pods a Kubernetes cluster holds)", generate, simulate.MaxPods)
	}
	if cmd.Flags().Changed("generate") && files {
		return fmt.Errorf("--generate %d and -f: give the workload one way, not both", generate)
	}
	return checkOutput(output)
}

// maxWork bounds nodes x GPUs per node x pods, the work of a simulation:
// each pod is tried against every GPU of the cluster. Measured here (issue
// 34): 500 nodes of 8 GPUs and 2000 pods, 8,000,000, took 66 s of CPU, so
// the bound is a few minutes; 5000 nodes of 8 GPUs and 150,000 pods would
// take days.
const maxWork = 20_000_000

// checkWork refuses a simulation past maxWork, replicas counted.
func checkWork(nodes int, nodeSlices []*resourceapi.ResourceSlice, pods []simulate.Pod) error {
	gpus := 0
	for _, s := range nodeSlices {
		gpus += len(s.Spec.Devices)
	}
	total := 0
	for _, p := range pods {
		total += max(p.Replicas, 1)
	}
	// At most 5000 x a node's GPUs x 150000: no int64 overflow.
	if work := int64(nodes) * int64(gpus) * int64(total); work > maxWork {
		return fmt.Errorf("--nodes %d x %d GPUs per node x %d pods = %d: must be at most %d (each pod is tried on every GPU; that is minutes of CPU already)", nodes, gpus, total, work, maxWork)
	}
	return nil
}

// workload is the pods to place: --generate's, drawn from the
// benchmark's mix, or those of the -f files, whose DeviceClasses are added
// to classes. A workload of more pods than a cluster holds is refused.
func workload(filenames []string, stdin io.Reader, generate int, seed uint64, slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass) ([]simulate.Pod, []*resourceapi.DeviceClass, error) {
	var pods []simulate.Pod
	switch {
	case generate > 0:
		sizes := simulate.MemorySizes(slices)
		pods = simulate.Pods(simulate.Generate(generate, seed, sizes[0]))
	case len(filenames) > 0:
		inputs, err := readInputs(filenames, stdin)
		if err != nil {
			return nil, nil, err
		}
		for _, in := range inputs {
			p, c, err := simulate.Load(in.Data, simulate.MemorySizes(slices))
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", in.Name, err)
			}
			pods, classes = append(pods, p...), append(classes, c...)
		}
	default:
		return nil, nil, fmt.Errorf("give a workload with -f or --generate")
	}
	total := 0
	for _, p := range pods {
		total += max(p.Replicas, 1)
		if total > simulate.MaxPods {
			return nil, nil, fmt.Errorf("the workload holds more than %d pods (replicas counted), the most a Kubernetes cluster holds", simulate.MaxPods)
		}
	}
	return pods, classes, nil
}

// schedulerFor is the node choice --scheduler names.
func schedulerFor(name string, seed uint64, packing bool) (simulate.Scheduler, error) {
	switch name {
	case "kube-scheduler":
		return simulate.Scheduler{Seed: seed, Packing: packing}, nil
	case "first-fit":
		return simulate.Scheduler{FirstFit: true}, nil
	default:
		return simulate.Scheduler{}, fmt.Errorf("--scheduler=%q: want kube-scheduler or first-fit", name)
	}
}

func printSimulation(out io.Writer, res *simulate.Result) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tGPU\tGUARANTEED\tCAPACITY\tCLAIMS")
	for _, g := range res.GPUs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", g.Node, g.Device, bytesQ(g.Guaranteed), bytesQ(g.Capacity), len(g.Claims))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, np := range res.NotPlaced {
		fmt.Fprintf(out, "not placed: %s: %s\n", np.Pod, np.Reason)
	}
	s := res.Summarize()
	_, err := fmt.Fprintf(out, "%d pods placed, %d not placed; %d of %d GPUs used; guaranteed memory %.1f%% of the GPUs used\n",
		s.PodsPlaced, s.PodsNotPlaced, s.GPUsUsed, res.TotalGPUs, 100*s.MemoryUtilisation)
	return err
}

func bytesQ(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }
