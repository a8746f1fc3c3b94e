// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io"
	"strings"
	"testing"
)

// TestFlagsRefusedAtStart: a flag value the controller cannot work with
// is refused before anything starts, with the flag, the value and the
// rule (issue 34). The kubeconfig points nowhere, so a value that slipped
// through fails later with another message.
func TestFlagsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert-lifetime", "1s"}, "--cert-lifetime 1s: must be at least 1h0m0s"},
		{[]string{"--cert-lifetime", "-1h"}, "--cert-lifetime -1h0m0s: must be at least 1h0m0s"},
		{[]string{"--cert-renew-before", "-1m"}, "--cert-renew-before -1m0s: must be from 0s"},
		{[]string{"--kai-reserved-gpu-memory-mib=-50000"}, "--kai-reserved-gpu-memory-mib -50000: reservedMiB: -50000: must be from 0 to 1073741824 MiB (1Pi)"},
		{[]string{"--kube-api-qps", "-1"}, "--kube-api-qps -1: must be from 1 to 10000"},
		{[]string{"--kube-api-burst", "-3"}, "--kube-api-burst -3: must be from 1 to 100000"},
		{[]string{"--namespace", "../etc"}, `--namespace "../etc": must be a DNS label`},
		{[]string{"--cert-secret", "a/b"}, `--cert-secret "a/b": must be a DNS subdomain`},
		{[]string{"--service", "Web.Hook"}, `--service "Web.Hook": must be a DNS label`},
		{[]string{"--packing-parameter", "x/../y"}, `--packing-parameter "x/../y": must be a DNS subdomain`},
		{[]string{"--time-slicing-class", "Bad Class"}, `--time-slicing-class "Bad Class": must be a DNS subdomain`},
		{[]string{"--cert-dir", "certs"}, `--cert-dir "certs": must be an absolute path`},
		{[]string{"--template-gc-grace", "-1m"}, "--template-gc-grace -1m0s: must be from 1m0s to 720h0m0s"},
		{[]string{"--template-gc-grace", "1s"}, "--template-gc-grace 1s: must be from 1m0s to 720h0m0s"},
		{[]string{"--client-ca-file", "ca.pem"}, `--client-ca-file "ca.pem": must be an absolute path`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newCommand()
			cmd.SetArgs(append([]string{"--kubeconfig", "/nonexistent/kubeconfig", "--metrics-address", ""}, tc.args...))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
