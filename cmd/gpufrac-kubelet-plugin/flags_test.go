// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io"
	"strings"
	"testing"
)

// TestFlagsRefusedAtStart: a flag value the plugin cannot work with is
// refused before anything starts, with the flag, the value and the rule
// (issue 34). The kubeconfig points nowhere, so a value that slipped
// through fails later with another message.
func TestFlagsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-name", "../../etc"}, `--node-name "../../etc": must be a DNS subdomain`},
		{[]string{"--node-name", ""}, `--node-name "": must be a DNS subdomain`},
		{[]string{"--kube-api-qps", "-1"}, "--kube-api-qps -1: must be from 1 to 10000"},
		{[]string{"--kube-api-burst", "0"}, "--kube-api-burst 0: must be from 1 to 100000"},
		{[]string{"--status-clear-delay", "-5s"}, "--status-clear-delay -5s: must be from 0s to 10m0s"},
		{[]string{"--status-burst-quiet", "-1ms"}, "--status-burst-quiet -1ms: must be from 0s to 1s"},
		{[]string{"--mps-ready-timeout", "-1s"}, "--mps-ready-timeout -1s: must be from 1s to 1h0m0s"},
		{[]string{"--plugin-data-dir", "data"}, `--plugin-data-dir "data": must be an absolute path`},
		{[]string{"--cdi-root", "../cdi"}, `--cdi-root "../cdi": must be an absolute path`},
		{[]string{"--driver-root", "driver"}, `--driver-root "driver": must be an absolute path`},
		{[]string{"--namespace", "Bad_Namespace"}, `--namespace "Bad_Namespace": must be a DNS label`},
		{[]string{"--dev-root", "dev"}, `--dev-root "dev": must be an absolute path`},
		{[]string{"--nvidia-runtime-config", "config.toml"}, `--nvidia-runtime-config "config.toml": must be an absolute path`},
		{[]string{"--mps-server-reserve-mib", "-1"}, "--mps-server-reserve-mib -1: must be from 0 to"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newCommand()
			args := append([]string{"--node-name", "node-1", "--kubeconfig", "/nonexistent/kubeconfig", "--metrics-address", ""}, tc.args...)
			cmd.SetArgs(args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
