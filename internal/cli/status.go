package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpufrac/gpufrac/internal/cli/status"
)

// clientFunc makes the client a command talks to the cluster with.
type clientFunc func(kubeconfig, context string) (kubernetes.Interface, error)

// kubeconfigClient loads the user's kubeconfig the way kubectl does.
func kubeconfigClient(kubeconfig, context string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-gpufrac"
	return kubernetes.NewForConfig(cfg)
}

// newStatusCommand shows gpufrac's GPUs and their claims in a cluster.
func newStatusCommand(streams IOStreams, clientFor clientFunc) *cobra.Command {
	var kubeconfig, kubeContext, node, output string
	cmd := &cobra.Command{
		Use:   "status [--node NODE] [-o json]",
		Short: "Show each gpufrac GPU: memory, guaranteed, limits, over-commit, claims, taints",
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := clientFor(kubeconfig, kubeContext)
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
			if output == "json" {
				enc := json.NewEncoder(streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(gpus)
			}
			return printStatus(streams.Out, gpus)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context")
	cmd.Flags().StringVar(&node, "node", "", "only this node")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for a machine-readable result")
	return cmd
}

func printStatus(out io.Writer, gpus []status.GPU) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tGPU\tMODEL\tMEMORY\tGUARANTEED\tLIMITS\tOVERCOMMIT\tCLAIMS\tTAINTS")
	for _, g := range gpus {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%d\t%s\n", g.Node, g.Device, g.Model, bytesQ(g.Memory),
			bytesQ(g.Guaranteed), bytesQ(g.LimitSum), g.Overcommit, len(g.Claims), strings.Join(g.Taints, ","))
		for _, c := range g.Claims {
			mode := c.Mode
			if !c.Prepared {
				mode = "(not prepared yet)"
			}
			fmt.Fprintf(w, "  %s/%s\tpods: %s\t%s\t\t%s\t%s\t%s\t\t\n", c.Namespace, c.Name, strings.Join(c.Pods, ","), "",
				bytesQ(c.Request), bytesQ(c.Limit), mode)
		}
	}
	return w.Flush()
}
