// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTranslateCommand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pods.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: v1
kind: Pod
metadata:
  name: half
  annotations:
    gpu-fraction: "0.5"
spec:
  containers:
  - name: main
    image: busybox
---
apiVersion: v1
kind: Pod
metadata:
  name: broken
  annotations:
    gpu-memory: "lots"
spec:
  containers:
  - name: main
    image: busybox
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"translate", "-f", file, "--gpu-memory", "141Gi"})
	err := root.Execute()
	if code := ExitCode(err, &errOut); code != 1 {
		t.Errorf("exit %d, want 1 for the refused pod", code)
	}
	got := out.String()
	for _, want := range []string{
		"kind: ResourceClaimTemplate",
		"name: size-141gi",
		"memory: 72192Mi",
		"resourceClaimTemplateName: gpufrac-kai-",
		"- name: gpufrac-main",
		`# Pod/broken: refused: cannot translate KAI GPU-sharing annotations: annotation gpu-memory="lots": failed to parse gpu memory annotation value: must be a whole number of MiB`,
		// Side by side: what KAI would do, what gpufrac does, differences marked.
		"# Pod/half: KAI-Scheduler vs gpufrac",
		"#    memory request, 141Gi GPU (144384 MiB total) | 72192Mi                                             | 72192Mi",
		"#    portion KAI's binder receives (%.2f)         | 0.50 ",
		"# != SM cap, 141Gi GPU (144384 MiB total)         | 50% (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, both modes) | none (TimeSlicing shares get no MPS thread percentage)",
		"# != scheduler                                    | kai-scheduler (reservation pod, binder annotations) | default-scheduler (DRA claim from template gpufrac-kai-",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestTranslateRefusesABadGPUSize(t *testing.T) {
	for _, size := range []string{"-1Gi", "0", "2Pi"} {
		var out, errOut bytes.Buffer
		root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		root.SetArgs([]string{"translate", "-f", "-", "--gpu-memory", size})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "must be a GPU memory size from 1Mi to 1Pi") {
			t.Errorf("--gpu-memory %s: %v", size, err)
		}
	}
}

// TestTranslateShowsKAIToTheMiB: on an 80 GB H100 (81559 MiB as KAI sees
// it; the slice's capacity 81408Mi on a node without MPS daemons), translate
// reports KAI's binder's 27730 MiB for gpu-fraction 0.335 and a claim asking
// that rounded up to the step; refuses 0.004 with KAI's binder's reason;
// and for 0.999 asks the whole capacity and says how much less than KAI's
// 81559 MiB that is.
func TestTranslateShowsKAIToTheMiB(t *testing.T) {
	run := func(fraction string, args ...string) (string, error) {
		var out, errOut bytes.Buffer
		root := NewRootCommand(IOStreams{In: strings.NewReader(`apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    gpu-fraction: "` + fraction + `"
spec:
  containers:
  - name: main
    image: busybox
`), Out: &out, ErrOut: &errOut})
		root.SetArgs(append([]string{"translate", "-f", "-", "--gpu-memory", "81559Mi"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	for _, tc := range []struct {
		fraction string
		args     []string
		wants    []string
	}{
		{"0.335", nil, []string{
			"# != memory request, 81408Mi GPU (81559 MiB total) | 27730Mi ",
			"| 27904Mi (KAI's 27730Mi rounded up to the step)",
			"memory: 27904Mi",
			"gpu/size-81408mi: KAI 27730Mi, the API server allocates",
		}},
		{"0.999", nil, []string{
			"| 81559Mi ",
			"| 81408Mi: KAI's figure is more than this GPU's capacity, so the claim asks the whole GPU, 151Mi less than KAI",
			"memory: 81408Mi",
		}},
		{"0.999", []string{"--mps-server-reserve-mib", "1024"}, []string{
			"memory request, 80384Mi GPU (81559 MiB total)",
			"so the claim asks the whole GPU, 1175Mi less than KAI",
		}},
		{"0.5", []string{"--kai-reserved-gpu-memory-mib", "1559"}, []string{
			"| 40000Mi ",
			"memory: 40192Mi",
		}},
	} {
		out, err := run(tc.fraction, tc.args...)
		if err != nil {
			t.Errorf("%s %v: %v\n%s", tc.fraction, tc.args, err, out)
		}
		for _, want := range tc.wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s %v: output lacks %q:\n%s", tc.fraction, tc.args, want, out)
			}
		}
	}
	out, err := run("0.004")
	if err == nil || !strings.Contains(out, `refused: cannot translate KAI GPU-sharing annotations: annotation gpu-fraction="0.004": KAI's binder refuses this pod: invalid received gpu portion "0.00"`) {
		t.Errorf("0.004: %v\n%s", err, out)
	}
	if !strings.Contains(out, `admitted; then its binder fails every bind: invalid received gpu portion "0.00"`) {
		t.Errorf("0.004: the KAI column lacks the binder's refusal:\n%s", out)
	}
}
