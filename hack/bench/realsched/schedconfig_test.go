// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestLiftSchedulerConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in           string
		wantQPS, wantBurst float64
		wantErr            string
	}{
		{name: "lift added", in: "kind: KubeSchedulerConfiguration\n", wantQPS: 1000, wantBurst: 2000},
		{name: "the file's values kept", in: "clientConnection:\n  qps: 5\n  burst: 7\n", wantQPS: 5, wantBurst: 7},
		{name: "burst only from the file", in: "clientConnection:\n  burst: 7\n", wantQPS: 1000, wantBurst: 7},
		{name: "not a mapping", in: "clientConnection: 3\n", wantErr: "clientConnection is a float64"},
		{name: "empty", in: "", wantErr: "empty document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := liftSchedulerConfig([]byte(tc.in), 1000)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				ClientConnection struct{ QPS, Burst float64 } `json:"clientConnection"`
			}
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got.ClientConnection.QPS != tc.wantQPS || got.ClientConnection.Burst != tc.wantBurst {
				t.Errorf("qps %v burst %v, want %v %v", got.ClientConnection.QPS, got.ClientConnection.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}

func TestWithExtender(t *testing.T) {
	type ext struct {
		URLPrefix        string `json:"urlPrefix"`
		PrioritizeVerb   string `json:"prioritizeVerb"`
		Weight           int    `json:"weight"`
		NodeCacheCapable bool   `json:"nodeCacheCapable"`
		Ignorable        bool   `json:"ignorable"`
		HTTPTimeout      string `json:"httpTimeout"`
	}
	type doc struct {
		APIVersion               string `json:"apiVersion"`
		PercentageOfNodesToScore int    `json:"percentageOfNodesToScore"`
		Extenders                []ext  `json:"extenders"`
	}
	for _, tc := range []struct {
		name, in string
		want     int // extenders
		wantPct  int
		wantErr  string
	}{
		{name: "no file: a minimal configuration", want: 1},
		{name: "the file's settings kept", in: "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 10\n", want: 1, wantPct: 10},
		{name: "appended to the file's extenders", in: "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n- urlPrefix: http://other\n", want: 2},
		{name: "extenders not a list", in: "extenders: 3\n", wantErr: "extenders is a float64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := withExtender([]byte(tc.in), "http://127.0.0.1:1/scheduler")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got doc
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got.APIVersion != "kubescheduler.config.k8s.io/v1" || len(got.Extenders) != tc.want || got.PercentageOfNodesToScore != tc.wantPct {
				t.Fatalf("got %+v", got)
			}
			e := got.Extenders[len(got.Extenders)-1]
			if e != (ext{URLPrefix: "http://127.0.0.1:1/scheduler", PrioritizeVerb: "prioritize", Weight: extenderWeight,
				NodeCacheCapable: true, Ignorable: true, HTTPTimeout: "1s"}) {
				t.Errorf("extender %+v: want ignorable, nodeCacheCapable, 1s timeout", e)
			}
		})
	}
}
