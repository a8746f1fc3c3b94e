// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSimulateCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"simulate", "--generate", "40", "--seed", "3", "--nodes", "2", "--gpus", "h200x2", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	var res struct {
		Placed    []struct{ Pod, Node string }
		NotPlaced []struct{ Pod, Reason string }
		GPUs      []struct {
			Node, Device string
			Guaranteed   int64 `json:"guaranteedBytes"`
			Claims       []string
		}
		TotalGPUs int
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Placed)+len(res.NotPlaced) != 40 || res.TotalGPUs != 4 || len(res.GPUs) == 0 {
		t.Fatalf("placed %d, not placed %d, GPUs %d of %d", len(res.Placed), len(res.NotPlaced), len(res.GPUs), res.TotalGPUs)
	}
	for _, g := range res.GPUs {
		if g.Guaranteed > 141<<30 {
			t.Errorf("GPU %s/%s over-committed: %d", g.Node, g.Device, g.Guaranteed)
		}
	}
	if len(res.NotPlaced) == 0 || res.NotPlaced[0].Reason == "" {
		t.Errorf("40 pods cannot all fit on 4 GPUs; expected reasons, got %+v", res.NotPlaced)
	}
}

// TestSimulateSchedulerModels: on many nodes the modelled kube-scheduler
// spreads a trace over more GPUs than with packing, and an unknown model
// is refused by name.
func TestSimulateSchedulerModels(t *testing.T) {
	gpusUsed := func(args ...string) int {
		t.Helper()
		var out, errOut bytes.Buffer
		root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		root.SetArgs(append([]string{"simulate", "--generate", "60", "--nodes", "16", "-o", "json"}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %s", err, errOut.String())
		}
		var res struct{ GPUs []struct{ Node string } }
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		return len(res.GPUs)
	}
	packed, spread := gpusUsed(), gpusUsed("--packing=false")
	if packed >= spread {
		t.Errorf("with packing %d GPUs, without %d: want fewer with packing", packed, spread)
	}
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"simulate", "--generate", "1", "--scheduler", "volcano"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `--scheduler="volcano"`) {
		t.Errorf("want an error naming --scheduler, got %v", err)
	}
}
