// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// TestClusterFlagsAreKubectls: status and why take kubectl's own flags
// (cli-runtime's ConfigFlags), before or after the subcommand, and pick the
// namespace as kubectl does: --namespace, else the kubeconfig context's.
func TestClusterFlagsAreKubectls(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: t}
contexts:
- name: dev
  context: {cluster: c, user: u, namespace: team-dev}
- name: prod
  context: {cluster: c, user: u, namespace: team-prod}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	errStop := errors.New("stop after the flags")
	for _, tc := range []struct {
		args          []string
		wantNamespace string
		wantContext   string
	}{
		{args: []string{"why", "p"}, wantNamespace: "team-dev"},
		{args: []string{"--context", "prod", "why", "p"}, wantNamespace: "team-prod", wantContext: "prod"},
		{args: []string{"why", "p", "--context=prod", "-n", "mine"}, wantNamespace: "mine", wantContext: "prod"},
		{args: []string{"status", "--context", "prod"}, wantNamespace: "team-prod", wantContext: "prod"},
	} {
		var got *genericclioptions.ConfigFlags
		root := newRootCommand(IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, func(g genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
			got, _ = g.(*genericclioptions.ConfigFlags)
			return nil, errStop
		})
		root.SetArgs(append(tc.args, "--kubeconfig", kubeconfig))
		if err := root.Execute(); !errors.Is(err, errStop) {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got == nil {
			t.Fatalf("%v: the command was not given kubectl's ConfigFlags", tc.args)
		}
		if ctx := *got.Context; ctx != tc.wantContext {
			t.Errorf("%v: context %q, want %q", tc.args, ctx, tc.wantContext)
		}
		if ns := namespaceOf(got); ns != tc.wantNamespace {
			t.Errorf("%v: namespace %q, want %q", tc.args, ns, tc.wantNamespace)
		}
		cfg, err := got.ToRESTConfig()
		if err != nil || cfg.Host != "https://127.0.0.1:1" || cfg.BearerToken != "t" {
			t.Errorf("%v: REST config %+v, %v", tc.args, cfg, err)
		}
	}
}

func TestOutputFormatsAreChecked(t *testing.T) {
	for _, cmd := range []string{"why", "status"} {
		root := newRootCommand(IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
			t.Errorf("%s -o yaml reached the cluster", cmd)
			return nil, errors.New("unreachable")
		})
		args := []string{cmd, "-o", "yaml"}
		if cmd == "why" {
			args = append(args, "p")
		}
		root.SetArgs(args)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `--output "yaml": the formats are json, or none for the table`) {
			t.Errorf("%s -o yaml: %v", cmd, err)
		}
	}
}
