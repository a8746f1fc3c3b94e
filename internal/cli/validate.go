// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

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
	var filenames, memory []string
	cmd := &cobra.Command{
		Use:   "validate -f FILE [-f FILE...] [--gpu-memory 141Gi ...]",
		Short: "Check the gpufrac.dev configs in manifests, offline",
		Long: `Check ResourceClaims, ResourceClaimTemplates and DeviceClasses (resource.k8s.io/v1)
before applying them: every opaque config for driver gpufrac.dev is decoded strictly and
validated as the admission webhook and the kubelet plugin will, and a memoryLimit is
checked against the memory request of the requests it applies to. DeviceClasses given
in the same run lend their computeMode to the claims that use them.

Prints "<Kind>/<name>: valid" for each object that passes and one
"<Kind>/<name>: <field path>: <reason>" line per problem otherwise; objects of other
kinds are listed as ignored. Exits 1 when there is any problem, and when an input holds
no object at all.

No memory request or memoryLimit may exceed the largest GPU: the largest --gpu-memory
given (the sizes of your cluster's GPUs), else the largest GPU of gpufrac's simulated
catalog; each problem says which bound applied. One input may hold at most 32 MiB.`,
		Example: `  kubectl gpufrac validate -f claim.yaml
  kubectl gpufrac validate -f deviceclasses.yaml -f claim.yaml
  helm template ./chart | kubectl gpufrac validate -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sizes, err := parseGPUMemory(memory)
			if err != nil {
				return err
			}
			inputs, err := readInputs(filenames, streams.In)
			if err != nil {
				return err
			}
			return printResults(streams.Out, manifestcheck.CheckWith(manifestcheck.Options{GPUMemorySizes: sizes}, inputs...))
		},
	}
	cmd.Flags().StringArrayVarP(&filenames, "filename", "f", nil,
		"file or directory of manifests (YAML or JSON) to check; - reads standard input; may be repeated")
	cmd.Flags().StringArrayVar(&memory, "gpu-memory", nil, "a GPU memory size in the cluster, e.g. 141Gi, bounding memory requests and limits; repeatable")
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
			data, err := manifestcheck.ReadLimited(stdin, "standard input")
			if err != nil {
				return nil, err
			}
			inputs = append(inputs, manifestcheck.Input{Name: stdinName, Data: data})
			continue
		}
		files, err := expand(name)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := readFile(f)
			if err != nil {
				return nil, err
			}
			inputs = append(inputs, manifestcheck.Input{Name: f, Data: data})
		}
	}
	return inputs, nil
}

// readFile reads at most manifestcheck.MaxInputBytes of a file, which may
// be a device or a pipe (/dev/zero, <(...)) with no end.
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return manifestcheck.ReadLimited(f, name)
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
