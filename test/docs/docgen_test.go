// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs_test

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/test/docs"
)

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"The two commands", "the-two-commands"},
		{"The end-to-end tests: a real node", "the-end-to-end-tests-a-real-node"},
		{"`kubectl gpufrac why POD | resourceclaim/NAME [-n NS] [-o json]`", "kubectl-gpufrac-why-pod--resourceclaimname--n-ns--o-json"},
		{"SMSharing: the managed MPS server", "smsharing-the-managed-mps-server"},
		{"Helm chart values", "helm-chart-values"},
	} {
		if got := docs.Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestAnchorsSkipCodeAndNumberRepeats(t *testing.T) {
	a := docs.Anchors("# Title\n```sh\n# not a heading\n```\n## Health\n## Health\n#nospace\n")
	for _, want := range []string{"title", "health", "health-1"} {
		if !a[want] {
			t.Errorf("anchor %q missing from %v", want, a)
		}
	}
	for _, unwanted := range []string{"not-a-heading", "nospace"} {
		if a[unwanted] {
			t.Errorf("anchor %q should not exist: %v", unwanted, a)
		}
	}
}

func TestValuesRendering(t *testing.T) {
	values := `# File header, not a value's comment.

# The image.
image:
  # Where from.
  repository: example.org/x
  tag: ""
plugin:
  # GPU nodes only.
  nodeSelector:
    gpu: "true"
  tolerations:
  - key: gpu
    operator: Exists
  # Not set.
  extra: {}
free: {a: 1}
`
	schema := `{"properties": {"image": {"properties": {"repository": {}, "tag": {}}},
		"plugin": {"properties": {"nodeSelector": {}, "tolerations": {}, "extra": {"properties": {"x": {}}}}}, "free": {}}}`
	got, err := docs.Values([]byte(values), []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	want := "| value | default | |\n| --- | --- | --- |\n" +
		"| `image` | — | The image. |\n" +
		"| `image.repository` | `\"example.org/x\"` | Where from. |\n" +
		"| `image.tag` | `\"\"` |  |\n" +
		"| `plugin.nodeSelector` | `{\"gpu\":\"true\"}` | GPU nodes only. |\n" +
		"| `plugin.tolerations` | `[{\"key\":\"gpu\",\"operator\":\"Exists\"}]` |  |\n" +
		"| `plugin.extra` | `{}` | Not set. |\n" +
		"| `free` | `{\"a\":1}` |  |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCommandsRendering(t *testing.T) {
	root := &cobra.Command{Use: "tool", Short: "Does things"}
	root.PersistentFlags().StringP("namespace", "n", "default", "the | namespace")
	sub := &cobra.Command{Use: "run -f FILE", Short: "Runs", Run: func(*cobra.Command, []string) {}}
	sub.Flags().StringArray("file", nil, "files\nto read")
	root.AddCommand(sub, &cobra.Command{Use: "secret", Hidden: true, Run: func(*cobra.Command, []string) {}})
	got := docs.Commands(root)
	for _, want := range []string{
		"#### `tool`\n\nDoes things.\n",
		"| `-n`, `--namespace` | string | `default` | the \\| namespace |",
		"#### `tool run`\n\nRuns.\n\n```\ntool run -f FILE [flags]\n```",
		"| `--file` | stringArray |  | files to read |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendering lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "secret") {
		t.Errorf("hidden command rendered:\n%s", got)
	}
}
