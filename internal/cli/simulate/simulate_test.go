// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package simulate_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

func shippedClasses(t *testing.T) []*resourceapi.DeviceClass {
	out, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const workload = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: llm-40g}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpufrac.dev
          capacity: {requests: {memory: 40Gi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: llm
  annotations: {gpufrac.dev/replicas: "5"}
spec:
  containers: [{name: main, image: x, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: llm-40g}]
---
apiVersion: v1
kind: Pod
metadata:
  name: kai-half
  annotations: {gpu-fraction: "0.5"}
spec:
  containers: [{name: main, image: x}]
---
apiVersion: v1
kind: Pod
metadata:
  name: no-gpu
spec:
  containers: [{name: main, image: x}]
`

func TestSimulate(t *testing.T) {
	ctx := context.Background()
	cluster := simulate.Cluster{Nodes: 1, GPUs: "h200x2"}
	slices, err := cluster.Slices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := simulate.MemorySizes(slices)
	if len(sizes) != 1 || sizes[0].String() != "141Gi" {
		t.Fatalf("sizes %v", sizes)
	}
	pods, classes, err := simulate.Load([]byte(workload), sizes)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 || pods[0].Replicas != 5 {
		t.Fatalf("pods %+v: want llm x5 and kai-half (no-gpu needs no placement)", pods)
	}
	big := simulate.Pods([]simulate.Ask{{Request: resource.MustParse("200Gi"), Limit: resource.MustParse("200Gi")}})
	big[0].Name = "too-big"
	res, err := simulate.Run(ctx, slices, append(shippedClasses(t), classes...), append(pods, big...))
	if err != nil {
		t.Fatal(err)
	}
	// 5 x 40Gi: three on gpu-0 (120Gi), two on gpu-1 (80Gi); the half GPU
	// (70.5Gi -> 72192Mi) fits on neither remaining 21Gi nor 61Gi.
	s := res.Summarize()
	if s.PodsPlaced != 5 || s.PodsNotPlaced != 2 || s.GPUsUsed != 2 || res.TotalGPUs != 2 {
		t.Errorf("summary %+v, want 5 placed, 2 not, 2 GPUs", s)
	}
	reasons := map[string]string{}
	for _, np := range res.NotPlaced {
		reasons[np.Pod] = np.Reason
	}
	if reasons["too-big"] != "request gpu asks for 200Gi, more than any GPU has (141Gi)" {
		t.Errorf("too-big: %q", reasons["too-big"])
	}
	if !strings.HasPrefix(reasons["kai-half"], "no node has room") {
		t.Errorf("kai-half: %q", reasons["kai-half"])
	}
	g := res.GPUs[0]
	if g.Node != "node-000" || g.Device != "gpu-0" || g.Guaranteed != 120<<30 || len(g.Claims) != 3 {
		t.Errorf("gpu-0 %+v", g)
	}
	if want := float64(200) / 282; s.MemoryUtilisation < want-0.001 || s.MemoryUtilisation > want+0.001 {
		t.Errorf("utilisation %.4f, want %.4f", s.MemoryUtilisation, want)
	}
}

func TestGenerateIsSeeded(t *testing.T) {
	mem := resource.MustParse("141Gi")
	a, b, c := simulate.Generate(50, 7, mem), simulate.Generate(50, 7, mem), simulate.Generate(50, 8, mem)
	same, differ := true, false
	for i := range a {
		same = same && a[i].Request.Cmp(b[i].Request) == 0
		differ = differ || a[i].Request.Cmp(c[i].Request) != 0
		if a[i].Limit.Cmp(a[i].Request) < 0 || a[i].Limit.Cmp(mem) > 0 {
			t.Errorf("ask %d: limit %s outside [request %s, GPU]", i, a[i].Limit.String(), a[i].Request.String())
		}
	}
	if !same || !differ {
		t.Errorf("same seed same trace: %v; other seed differs: %v", same, differ)
	}
}
