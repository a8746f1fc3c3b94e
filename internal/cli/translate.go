// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// newTranslateCommand previews, offline, what the admission webhook makes of
// KAI-annotated pods: the mutated pods and the claim templates, with the
// same code the webhook runs.
func newTranslateCommand(streams IOStreams) *cobra.Command {
	var filenames []string
	var memory []string
	var kaiReserve, serverReserve int64
	cmd := &cobra.Command{
		Use:   "translate -f POD.yaml [--gpu-memory 81559Mi ...]",
		Short: "Show what gpufrac makes of KAI-Scheduler GPU-sharing annotations",
		Long: "translate prints, for each Pod in the input, what KAI-Scheduler would do with it next to what\n" +
			"gpufrac does (rows marked != differ), then the claim template and the changed Pod the\n" +
			"gpufrac admission webhook would produce. --gpu-memory stands in for the GPUs the webhook\n" +
			"reads from the cluster's ResourceSlices (needed for gpu-fraction and portions): each is a\n" +
			"GPU's total memory as KAI sees it (the node label nvidia.com/gpu.memory, NVML's total, the\n" +
			"slice attribute memoryTotalMiB), e.g. 81559Mi for an 80 GB H100. KAI's binder computes\n" +
			"from that total less --kai-reserved-gpu-memory-mib; the claim draws from the slice's\n" +
			"capacity, the total less --mps-server-reserve-mib rounded down to 256Mi. Memory figures\n" +
			"are what the API server allocates (the slice's minimum 1Gi and step 256Mi).",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(filenames) == 0 {
				return fmt.Errorf("-f is required")
			}
			opts, err := translateOptions(memory, kaiReserve, serverReserve)
			if err != nil {
				return err
			}
			inputs, err := readInputs(filenames, streams.In)
			if err != nil {
				return err
			}
			failed := false
			for _, in := range inputs {
				ok, err := translateDocuments(streams.Out, streams.ErrOut, in.Name, in.Data, opts)
				if err != nil {
					return err
				}
				failed = failed || !ok
			}
			if failed {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&filenames, "filename", "f", nil, "file or directory of Pods (- for stdin); repeatable")
	cmd.Flags().StringArrayVar(&memory, "gpu-memory", nil, "a GPU's total memory as KAI sees it (node label nvidia.com/gpu.memory, in MiB), e.g. 81559Mi; repeatable")
	cmd.Flags().Int64Var(&kaiReserve, "kai-reserved-gpu-memory-mib", 0, "MiB KAI's binder holds back from each GPU before a portion becomes memory, as gpufrac-controller's flag of that name")
	cmd.Flags().Int64Var(&serverReserve, "mps-server-reserve-mib", 0, "MiB the node's gpufrac plugin keeps back per GPU for its MPS server (its flag of that name; 0 for a node that runs no daemon)")
	return cmd
}

// translateOptions turns translate's flags into the facts the webhook
// reads from the cluster: per GPU, the capacity its slice would publish
// (domain.OfferedMemory) and its total.
func translateOptions(memory []string, kaiReserve, serverReserve int64) (kai.Options, error) {
	totals, err := parseGPUMemory(memory)
	if err != nil {
		return kai.Options{}, err
	}
	if err := kai.ValidateReservedMiB(kaiReserve); err != nil {
		return kai.Options{}, fmt.Errorf("--kai-reserved-gpu-memory-mib %d: %w", kaiReserve, err)
	}
	if serverReserve < 0 || serverReserve > 1<<20 {
		return kai.Options{}, fmt.Errorf("--mps-server-reserve-mib %d: must be from 0 to %d", serverReserve, 1<<20)
	}
	opts := kai.Options{ReservedMiB: kaiReserve, GPUTotalsMiB: map[int64]int64{}}
	for _, total := range totals {
		// A total in whole MiB, as KAI's label and the slice attribute.
		totalMiB := total.Value() >> 20
		capacity := domain.OfferedMemory(domain.GPU{MemoryBytes: uint64(totalMiB) << 20, ServerReserveBytes: uint64(serverReserve) << 20})
		if capacity.Sign() <= 0 {
			return kai.Options{}, fmt.Errorf("--gpu-memory %s: the MPS server reserve of %d MiB leaves no capacity", total.String(), serverReserve)
		}
		if _, dup := opts.GPUTotalsMiB[capacity.Value()]; dup {
			// Two totals with one capacity: KAI's figure on the larger,
			// so the claim asks at least KAI's on either.
			opts.GPUTotalsMiB[capacity.Value()] = max(opts.GPUTotalsMiB[capacity.Value()], totalMiB)
			continue
		}
		opts.GPUMemorySizes = append(opts.GPUMemorySizes, capacity)
		opts.GPUTotalsMiB[capacity.Value()] = totalMiB
	}
	return opts, nil
}

// maxMessageBytes caps one message taken from a manifest in the output.
const maxMessageBytes = 1024

// parseGPUMemory reads --gpu-memory values, each size once: GPU sizes from 1Mi (KAI's
// portions are whole MiB of a GPU) to 1Pi (inferred: several thousand times
// today's largest GPU, b200's 180Gi, yet far from overflowing int64 bytes,
// so no later arithmetic on it can overflow).
func parseGPUMemory(values []string) ([]resource.Quantity, error) {
	var sizes []resource.Quantity
	for _, m := range values {
		q, err := v1alpha1.ParseQuantity(m)
		if err != nil {
			return nil, fmt.Errorf("--gpu-memory %q: %w", m, err)
		}
		if q.Cmp(resource.MustParse("1Mi")) < 0 || q.Cmp(resource.MustParse("1Pi")) > 0 {
			return nil, fmt.Errorf("--gpu-memory %q: must be a GPU memory size from 1Mi to 1Pi", m)
		}
		// A size given twice (141Gi and 144384Mi are one size) is one
		// GPU size: two would make two subrequests of the same name.
		if slices.ContainsFunc(sizes, func(s resource.Quantity) bool { return s.Cmp(q) == 0 }) {
			continue
		}
		sizes = append(sizes, q)
	}
	return sizes, nil
}

// translateDocuments prints the translation of every Pod in data; it
// reports false if any Pod was refused.
func translateDocuments(out, errOut io.Writer, source string, data []byte, opts kai.Options) (bool, error) {
	ok := true
	found := false
	doc := 0
	for raw, err := range yamldocs.All(data) {
		doc++
		if err != nil {
			return false, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		found = true
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(raw, &pod); err != nil || pod.Kind != "Pod" {
			fmt.Fprintf(errOut, "%s: document %d: not a Pod, skipped\n", source, doc)
			continue
		}
		// The name and the messages come from the file: bounded (a name
		// the API server accepts is at most 253 bytes, documented).
		name := safetext.Cap(pod.Name, 253)
		if isHAMiPod(&pod) {
			hok, err := translateHAMi(out, errOut, name, &pod, hamiGPUs(opts))
			if err != nil {
				return false, err
			}
			ok = ok && hok
			continue
		}
		fmt.Fprintf(out, "# Pod/%s: KAI-Scheduler vs gpufrac\n", name)
		printComparison(out, "KAI-Scheduler", kai.Compare(&pod, opts))
		res, err := kai.Translate(&pod, opts)
		switch {
		case err != nil:
			fmt.Fprintf(out, "# Pod/%s: refused: %s\n", name, safetext.Cap(err.Error(), maxMessageBytes))
			ok = false
		case res == nil:
			fmt.Fprintf(out, "# Pod/%s: nothing to translate\n", name)
		default:
			for _, w := range res.Warnings {
				fmt.Fprintf(errOut, "Warning: Pod/%s: %s\n", name, safetext.Cap(w, maxMessageBytes))
			}
			if err := printYAML(out, res.Template); err != nil {
				return false, err
			}
			if err := printYAML(out, res.Pod); err != nil {
				return false, err
			}
		}
	}
	if !found {
		// An empty file or pipe is a mistake upstream, not a pod.
		return false, fmt.Errorf("%s: no Kubernetes object in this input: it is empty", source)
	}
	return ok, nil
}

// printComparison prints, as YAML comments, a table of what the other
// scheduler (theirs: its column's heading) would do with the pod next to
// what gpufrac does; rows that differ are marked "!=".
func printComparison(out io.Writer, theirs string, rows []translated.Row) {
	width := [2]int{len("aspect"), len(theirs)}
	cell := func(s string) string { return safetext.Cap(s, maxMessageBytes) }
	for _, r := range rows {
		width[0], width[1] = max(width[0], len(r.Aspect)), max(width[1], len(cell(r.Theirs)))
	}
	line := func(mark, a, k, g string) {
		fmt.Fprintf(out, "# %-2s %-*s | %-*s | %s\n", mark, width[0], a, width[1], k, g)
	}
	line("", "aspect", theirs, "gpufrac")
	for _, r := range rows {
		mark := ""
		if r.Differs() {
			mark = "!="
		}
		line(mark, r.Aspect, cell(r.Theirs), cell(r.Gpufrac))
	}
}

func printYAML(out io.Writer, obj any) error {
	raw, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Errorf("rendering YAML: %w", err)
	}
	_, err = fmt.Fprintf(out, "---\n%s", raw)
	return err
}
