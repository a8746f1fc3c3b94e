// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/gpufrac/gpufrac/internal/cli/status"
	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
)

// newStatusCommand shows gpufrac's GPUs and their claims in a cluster.
func newStatusCommand(streams IOStreams, access *genericclioptions.ConfigFlags, clientFor clientFunc) *cobra.Command {
	var node, output, promURL string
	cmd := &cobra.Command{
		Use:   "status [--node NODE] [-o json|map [--prometheus-url URL]]",
		Short: "Show each gpufrac GPU: memory, guaranteed, limits, over-commit, claims, taints; and per GPU pool how fragmented the shares are",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "map" {
				if err := checkOutput(output); err != nil {
					return fmt.Errorf("%w; or map for a memory map", err)
				}
				if promURL != "" {
					return fmt.Errorf("--prometheus-url %q: used memory is drawn only in the map; add -o map", promURL)
				}
			}
			client, err := clientFor(access)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("listing ResourceSlices: %w", err)
			}
			claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("listing ResourceClaims: %w", err)
			}
			gpus := status.Build(slices.Items, claims.Items, node)
			if output == "map" {
				return printMap(ctx, streams, gpus, status.Fragmentation(slices.Items, claims.Items), promURL)
			}
			if output == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(gpus)
			}
			if err := printStatus(streams.Out, gpus); err != nil {
				return err
			}
			return printFragmentation(streams.Out, status.Fragmentation(slices.Items, claims.Items))
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only this node")
	cmd.Flags().StringVarP(&output, "output", "o", "",
		"json for a machine-readable result; map for a memory map, one line per GPU (coloured on a terminal unless NO_COLOR is set)")
	cmd.Flags().StringVar(&promURL, "prometheus-url", "",
		"with -o map: the base URL of a Prometheus that scrapes gpufrac's kubelet plugins (e.g. http://prometheus:9090); "+
			"status queries its /api/v1/query once for "+usageQuery+" and draws each claim's used memory in the map")
	return cmd
}

func printStatus(out io.Writer, gpus []status.GPU) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tGPU\tMODEL\tMEMORY\tSERVER RESERVE\tGUARANTEED\tLIMITS\tOVERCOMMIT\tCLAIMS\tTAINTS")
	for _, g := range gpus {
		reserve := "-"
		if g.ServerReserve > 0 {
			reserve = bytesQ(g.ServerReserve)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%d\t%s\n", g.Node, g.Device, g.Model, bytesQ(g.Memory), reserve,
			bytesQ(g.Guaranteed), bytesQ(g.LimitSum), g.Overcommit, len(g.Claims), strings.Join(g.Taints, ","))
		for _, c := range g.Claims {
			mode := c.Mode
			if !c.Prepared {
				mode = "(not prepared yet)"
			}
			if c.Invalid != "" {
				mode += " INVALID: " + c.Invalid
			}
			fmt.Fprintf(w, "  %s/%s\tpods: %s\t%s\t\t\t%s\t%s\t%s\t\t\n", c.Namespace, c.Name, strings.Join(c.Pods, ","), "",
				bytesQ(c.Request), bytesQ(c.Limit), mode)
		}
		for _, m := range g.Monitors {
			what := "monitor (adminAccess, not counted)"
			if !m.Prepared {
				what = "monitor (adminAccess, not prepared yet)"
			}
			fmt.Fprintf(w, "  %s/%s\tpods: %s\t\t\t\t-\t-\t%s\t\t\n", m.Namespace, m.Name, strings.Join(m.Pods, ","), what)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return printEnforced(out, gpus)
}

// printEnforced says, below the table, what each node without per-cgroup
// limits (an older driver, or cgroup v1) does and does not enforce, once
// per node.
func printEnforced(out io.Writer, gpus []status.GPU) error {
	said := map[string]bool{}
	for _, g := range gpus {
		if g.Enforcement == "" || g.Enforcement == "dmem" || said[g.Node] {
			continue
		}
		said[g.Node] = true
		if _, err := fmt.Fprintf(out, "%s (memoryEnforcement %s): %s\n", g.Node, g.Enforcement, g.Enforced); err != nil {
			return err
		}
	}
	return nil
}

// printFragmentation writes one line per GPU pool that holds shares: the
// GPUs in use against the lower bound of their shares, and the GPUs that
// would free up if their shares moved (a report: nothing is moved).
func printFragmentation(out io.Writer, pools []fragmentation.Pool) error {
	for _, p := range pools {
		if p.InUse == 0 {
			continue
		}
		line := fmt.Sprintf("pool %q: %d GPUs hold shares, at least %d needed (%s guaranteed over %s a GPU)",
			p.Name, p.InUse, p.LowerBound, bytesQ(p.Guaranteed), bytesQ(p.GPUMemory))
		if p.Freeable > 0 {
			names := make([]string, len(p.FreeableGPUs))
			for i, f := range p.FreeableGPUs {
				names[i] = fmt.Sprintf("%s/%s (%s in %d)", f.Node, f.Device, bytesQ(f.Guaranteed), f.Shares)
			}
			more := ""
			if p.Freeable > len(names) {
				more = fmt.Sprintf(" and %d more", p.Freeable-len(names))
			}
			line += fmt.Sprintf("; %d would free up if their shares moved elsewhere in the pool: %s%s (a report, nothing is evicted)",
				p.Freeable, strings.Join(names, ", "), more)
		} else {
			line += "; no GPU would free up by moving its shares"
		}
		if _, err := fmt.Fprintln(out, line); err != nil {
			return err
		}
	}
	return nil
}
