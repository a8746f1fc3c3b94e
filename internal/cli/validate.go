package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/internal/manifestcheck"
)

const stdinName = "<stdin>"

func newValidateCommand(streams IOStreams) *cobra.Command {
	var filenames []string
	cmd := &cobra.Command{
		Use:   "validate -f FILE [-f FILE...]",
		Short: "Check the gpufrac.dev configs in manifests, offline",
		Long: `Check ResourceClaims, ResourceClaimTemplates and DeviceClasses (resource.k8s.io/v1)
before applying them: every opaque config for driver gpufrac.dev is decoded strictly and
validated as the admission webhook and the kubelet plugin will, and a memoryLimit is
checked against the memory request of the requests it applies to. DeviceClasses given
in the same run lend their computeMode to the claims that use them.

Prints "<Kind>/<name>: valid" for each object that passes and one
"<Kind>/<name>: <field path>: <reason>" line per problem otherwise; objects of other
kinds are listed as ignored. Exits 1 when there is any problem.`,
		Example: `  kubectl gpufrac validate -f claim.yaml
  kubectl gpufrac validate -f deviceclasses.yaml -f claim.yaml
  helm template ./chart | kubectl gpufrac validate -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inputs, err := readInputs(filenames, streams.In)
			if err != nil {
				return err
			}
			return printResults(streams.Out, manifestcheck.Check(inputs...))
		},
	}
	cmd.Flags().StringArrayVarP(&filenames, "filename", "f", nil,
		"file or directory of manifests (YAML or JSON) to check; - reads standard input; may be repeated")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func printResults(out io.Writer, results []manifestcheck.Result) error {
	failed := false
	for _, r := range results {
		for _, line := range r.Lines() {
			if _, err := fmt.Fprintln(out, line); err != nil {
				return err
			}
		}
		failed = failed || r.Failed()
	}
	if failed {
		return &ExitError{Code: 1}
	}
	return nil
}

// readInputs reads every -f in order. A directory contributes its .yaml,
// .yml and .json files (not its subdirectories), as with kubectl apply.
func readInputs(filenames []string, stdin io.Reader) ([]manifestcheck.Input, error) {
	var inputs []manifestcheck.Input
	readStdin := false
	for _, name := range filenames {
		if name == "-" {
			if readStdin {
				return nil, fmt.Errorf("-f - given more than once: standard input can be read only once")
			}
			readStdin = true
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading standard input: %w", err)
			}
			inputs = append(inputs, manifestcheck.Input{Name: stdinName, Data: data})
			continue
		}
		files, err := expand(name)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			inputs = append(inputs, manifestcheck.Input{Name: f, Data: data})
		}
	}
	return inputs, nil
}

func expand(name string) ([]string, error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{name}, nil
	}
	entries, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, ext) {
			files = append(files, filepath.Join(name, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .yaml, .yml or .json files in this directory", name)
	}
	return files, nil // os.ReadDir sorts by name
}
