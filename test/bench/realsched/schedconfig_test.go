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
