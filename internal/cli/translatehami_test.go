// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestTranslatePreviewsHAMiPods: a HAMi pod is shown next to what HAMi
// would give (HAMi's percentage of the GPU's total, what the API server
// allocates), then its template and the pod without HAMi's resources; a
// pod HAMi refuses is refused with HAMi's reason.
func TestTranslatePreviewsHAMiPods(t *testing.T) {
	in := `apiVersion: v1
kind: Pod
metadata: {name: vllm}
spec:
  containers:
  - name: main
    image: cuda
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "30"}
---
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - name: main
    image: cuda
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "130"}
`
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(in), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"translate", "-f", "-", "--gpu-memory", "81559Mi"})
	if code := ExitCode(root.Execute(), &errOut); code != 1 {
		t.Errorf("exit %d, want 1 for the refused pod", code)
	}
	got := out.String()
	for _, want := range []string{
		"# Pod/vllm: HAMi vs gpufrac",
		// ⌊81559 × 30 / 100⌋ = 24467 MiB; the request policy allocates 24Gi.
		"# != container main: memory, 81559 MiB GPU | 24467 MiB",
		"| 24Gi",
		"memory: 24467Mi",
		"gpufrac.dev/hami-resources: '{\"main\":{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem-percentage\":\"30\"}}}'",
		"# Pod/bad: refused: cannot translate HAMi GPU resources: container main nvidia.com/gpumem-percentage: invalid nvidia.com/gpumem-percentage value 130 in container main: must be an integer between 0 and 100",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "nvidia.com/gpu: \"1\"") {
		t.Errorf("the changed pod still asks nvidia.com/gpu:\n%s", got)
	}
}
