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
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/gpufrac/gpufrac/internal/cli/why"
)

// newWhyCommand explains where a pod's gpufrac claims are, or why they are
// nowhere.
func newWhyCommand(streams IOStreams, access *genericclioptions.ConfigFlags, clientFor clientFunc) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "why POD | resourceclaim/NAME [-n NAMESPACE] [-o json]",
		Short: "Explain why a pod's GPU claims do not fit, or where its shares are and what they use",
		Long: "why replays the scheduler's own allocator over the cluster's ResourceSlices and claims and says,\n" +
			"per node, what keeps a Pending pod's claims out (not enough free guaranteed memory on any GPU,\n" +
			"fragmentation, a DeviceClass or CEL selector, a taint, a node that cannot enforce the config) and\n" +
			"what would make them fit. For a pod whose claims are allocated it shows each share: GPU, request,\n" +
			"limit, enforcement, compute mode, MPS route and memory in use. What your access does not let it\n" +
			"read is listed at the end.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			client, err := clientFor(access)
			if err != nil {
				return err
			}
			namespace := namespaceOf(access)
			ctx := cmd.Context()
			snap, target, err := gather(ctx, client, namespace, args[0])
			if err != nil {
				return err
			}
			e, err := why.Explain(ctx, snap, target)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(e)
			}
			return printWhy(streams.Out, e)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for a machine-readable result")
	return cmd
}

func printWhy(out io.Writer, e *why.Explanation) error {
	subject := strings.Join(e.Claims, ", ")
	if e.Pod != "" {
		subject = fmt.Sprintf("Pod %s (%s", e.Pod, e.Phase)
		if e.Node != "" {
			subject += ", node " + e.Node
		}
		subject += ")"
	}
	fmt.Fprintf(out, "%s: %s\n", subject, e.Summary)
	if e.Pod != "" && len(e.Claims) > 0 {
		fmt.Fprintf(out, "Claims: %s\n", strings.Join(e.Claims, ", "))
	}
	if len(e.Nodes) > 0 {
		if err := printWhyNodes(out, e.Nodes); err != nil {
			return err
		}
	}
	if len(e.Suggestions) > 0 {
		fmt.Fprintln(out, "\nWhat would make it fit (each checked with the scheduler's allocator):")
		for _, s := range e.Suggestions {
			fmt.Fprintf(out, "  - %s\n", s.Message)
		}
	}
	if len(e.Problems) > 0 {
		fmt.Fprintln(out, "\nThe node's plugin refuses:")
		for _, p := range e.Problems {
			fmt.Fprintf(out, "  - %s: %s\n", p.Claim, p.Message)
		}
	}
	if len(e.Shares) > 0 {
		if err := printWhyShares(out, e.Shares); err != nil {
			return err
		}
	}
	if len(e.Unseen) > 0 {
		fmt.Fprintln(out, "\nCould not see (your access, or unreachable; the answer may be incomplete):")
		for _, u := range e.Unseen {
			fmt.Fprintf(out, "  - %s\n", u)
		}
	}
	return nil
}

// printWhyNodes prints the table of nodes: whether the request fits each,
// why not, and each GPU's free memory.
func printWhyNodes(out io.Writer, nodes []why.NodeResult) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(out)
	fmt.Fprintln(w, "NODE\tFITS\tWHY NOT")
	for _, n := range nodes {
		fits := "no"
		if n.Fits {
			fits = "yes"
		}
		if len(n.Reasons) == 0 {
			fmt.Fprintf(w, "%s\t%s\t\n", n.Node, fits)
		}
		for i, r := range n.Reasons {
			node := n.Node
			if i > 0 {
				node, fits = "", ""
			}
			who := ""
			if r.Claim != "" {
				who = r.Claim + " " + r.Request + ": "
			}
			fmt.Fprintf(w, "%s\t%s\t%s: %s%s\n", node, fits, r.Code, who, r.Message)
		}
		for _, g := range n.GPUs {
			excluded := ""
			if g.ExcludedBy != "" {
				excluded = ", excluded by " + g.ExcludedBy
			}
			reserve := ""
			if g.ServerReserveBytes > 0 {
				reserve = fmt.Sprintf(" (%s more kept for the MPS server)", bytesQ(g.ServerReserveBytes))
			}
			fmt.Fprintf(w, "  %s\t\t%s free of %s%s, %s, enforcement %s%s\n", g.Device, bytesQ(g.FreeBytes), bytesQ(g.MemoryBytes), reserve, g.Model, g.Enforcement, excluded)
		}
	}
	return w.Flush()
}

// printWhyShares prints the table of the claims' shares (what is
// guaranteed, limited and used) and then the shares' conditions.
func printWhyShares(out io.Writer, shares []why.Share) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(out)
	fmt.Fprintln(w, "CLAIM\tREQUEST\tNODE\tGPU\tGUARANTEED\tLIMIT\tMODE\tENFORCEMENT\tMPS\tUSED")
	for _, s := range shares {
		limit, mode, enf := "-", "(not prepared)", "-"
		if s.Prepared {
			limit, mode, enf = bytesQ(s.LimitBytes), s.ComputeMode, s.Enforcement
		}
		mps := s.MPSServer
		if mps == "" {
			mps = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Claim, s.Request, s.Node, s.Device, s.UUID,
			bytesQ(s.RequestBytes), limit, mode, enf, mps, usage(s))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, s := range shares {
		for _, c := range s.Conditions {
			fmt.Fprintf(out, "  %s %s: %s\n", s.Claim, s.Device, c)
		}
	}
	return nil
}

// usage says what a share's containers use against its request and limit.
func usage(s why.Share) string {
	if len(s.Usage) == 0 {
		return "-"
	}
	var parts []string
	for _, u := range s.Usage {
		part := fmt.Sprintf("%s/%s %s (%d%% of request", u.Pod, u.Container, bytesQ(u.UsedBytes), percent(u.UsedBytes, s.RequestBytes))
		if s.LimitBytes > 0 {
			part += fmt.Sprintf(", %d%% of limit", percent(u.UsedBytes, s.LimitBytes))
		}
		parts = append(parts, part+")")
	}
	return strings.Join(parts, "; ")
}

func percent(a, b int64) int64 {
	if b == 0 {
		return 0
	}
	return a * 100 / b
}
