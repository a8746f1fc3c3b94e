// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/internal/translate/hami"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// isHAMiPod: HAMi's resources and no KAI annotation (a pod with both is
// refused by either path; KAI's preview says why).
func isHAMiPod(pod *corev1.Pod) bool {
	return hami.HasResources(pod) && !kai.HasAnnotations(pod.Annotations)
}

// hamiGPUs pairs each GPU capacity of the KAI options (--gpu-memory less
// --mps-server-reserve-mib, down to the step) with its total, which HAMi
// computes on (each --gpu-memory size is a GPU's memoryTotalMiB).
func hamiGPUs(opts kai.Options) []hami.GPU {
	var out []hami.GPU
	for _, c := range opts.GPUMemorySizes {
		out = append(out, hami.GPU{TotalMiB: opts.GPUTotalsMiB[c.Value()], Capacity: c})
	}
	return out
}

// translateHAMi prints, for a pod asking HAMi's resources, what HAMi would
// give next to what gpufrac does, then the templates and the changed pod,
// as the webhook of an opted-in namespace makes them; it reports false
// when the pod is refused.
func translateHAMi(out, errOut io.Writer, name string, pod *corev1.Pod, gpus []hami.GPU) (bool, error) {
	opts := hami.Options{GPUs: gpus}
	fmt.Fprintf(out, "# Pod/%s: HAMi vs gpufrac (namespaces opted in to HAMi translation; --gpu-memory is each GPU's memoryTotalMiB, less --mps-server-reserve-mib for its capacity)\n", name)
	printComparison(out, "HAMi", hami.Compare(pod, opts))
	res, err := hami.Translate(pod, opts)
	switch {
	case err != nil:
		fmt.Fprintf(out, "# Pod/%s: refused: %s\n", name, safetext.Cap(err.Error(), maxMessageBytes))
		return false, nil
	case res == nil:
		fmt.Fprintf(out, "# Pod/%s: nothing to translate\n", name)
		return true, nil
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(errOut, "Warning: Pod/%s: %s\n", name, safetext.Cap(w, maxMessageBytes))
	}
	for _, t := range res.Templates {
		if note := t.Annotations[hami.AnnotationRounding]; note != "" {
			fmt.Fprintf(out, "# %s: %s\n", t.Name, strings.ReplaceAll(safetext.Cap(note, maxMessageBytes), "; ", "\n#   "))
		}
		if err := printYAML(out, t); err != nil {
			return false, err
		}
	}
	return true, printYAML(out, res.Pod)
}
