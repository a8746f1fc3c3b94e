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
		"#    memory request, 141Gi GPU | 72192Mi",
		"# != SM cap, 141Gi GPU         | 50% (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, both modes) | none (TimeSlicing shares get no MPS thread percentage)",
		"# != scheduler                 | kai-scheduler (reservation pod, binder annotations) | default-scheduler (DRA claim from template gpufrac-kai-",
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
