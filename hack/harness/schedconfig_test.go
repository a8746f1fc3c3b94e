// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestSchedulerConfig(t *testing.T) {
	const kubeconfig = "/tmp/cp/kube-scheduler.kubeconfig"
	for _, tc := range []struct {
		name, in string
		// want is the decoded result's clientConnection; wantErr a substring.
		want    map[string]any
		wantErr string
		// keep is a top-level field that must survive unchanged.
		keep string
	}{
		{name: "kubeconfig added, the rest kept",
			in:   "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 10\n",
			want: map[string]any{"kubeconfig": kubeconfig}, keep: "percentageOfNodesToScore"},
		{name: "clientConnection merged",
			in:   "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  qps: 1000\n",
			want: map[string]any{"kubeconfig": kubeconfig, "qps": float64(1000)}},
		{name: "the same kubeconfig is accepted",
			in:   "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: " + kubeconfig + "\n",
			want: map[string]any{"kubeconfig": kubeconfig}},
		{name: "another kubeconfig is refused",
			in:      "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: /etc/kubernetes/scheduler.conf\n",
			wantErr: `clientConnection.kubeconfig "/etc/kubernetes/scheduler.conf"`},
		{name: "old apiVersion", in: "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
			wantErr: `apiVersion "kubescheduler.config.k8s.io/v1beta3"`},
		{name: "wrong kind", in: "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeProxyConfiguration\n",
			wantErr: `kind "KubeProxyConfiguration"`},
		{name: "clientConnection not a mapping",
			in:      "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection: yes\n",
			wantErr: "clientConnection is a bool"},
		{name: "empty", in: "", wantErr: "empty document"},
		{name: "not YAML", in: "a: [", wantErr: "scheduler configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := SchedulerConfig([]byte(tc.in), kubeconfig)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got, in map[string]any
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatalf("output is not YAML: %v\n%s", err, out)
			}
			if err := yaml.Unmarshal([]byte(tc.in), &in); err != nil {
				t.Fatal(err)
			}
			conn, _ := got["clientConnection"].(map[string]any)
			if len(conn) != len(tc.want) {
				t.Errorf("clientConnection %v, want %v", conn, tc.want)
			}
			for k, v := range tc.want {
				if conn[k] != v {
					t.Errorf("clientConnection.%s = %v, want %v", k, conn[k], v)
				}
			}
			if got["apiVersion"] != in["apiVersion"] || got["kind"] != in["kind"] {
				t.Errorf("apiVersion/kind changed: %v %v", got["apiVersion"], got["kind"])
			}
			if tc.keep != "" && got[tc.keep] != in[tc.keep] {
				t.Errorf("%s = %v, want %v", tc.keep, got[tc.keep], in[tc.keep])
			}
		})
	}
}
