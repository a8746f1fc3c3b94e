// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/node/mps"
)

// TestNodeServerTwoGPUClaimIntegration (issue 35 item 4): a simulated dmem
// node with two GPUs whose plugin runs --mps-server-scope=node publishes
// mpsServerScope "node"; a claim for a 20Gi share (limit 30Gi) of each of
// two GPUs, whose class selects that scope, is allocated by the real
// scheduler and prepared through the plugin's DRA socket by the kubelet
// stand-in, which runs the one MPS daemon Pod (the node server, over both
// GPUs, on the MPS double through gpufrac-mps-launcher). The container is
// a client of that server with per-GPU limits; the server goes with the
// claim.
func TestNodeServerTwoGPUClaimIntegration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.nodeWith(harness.NodeOptions{GPUs: "h200x2", MPSImage: harness.DefaultMPSImage, PluginArgs: []string{"--mps-server-scope=node"}})
	devices := e.slices(node.Name)
	var uuids []string
	for _, s := range devices {
		for _, d := range s.Spec.Devices {
			if got := stringAttr(d, "mpsServerScope"); got != "node" {
				t.Errorf("device %s says mpsServerScope %q, want node", d.Name, got)
			}
			uuids = append(uuids, stringAttr(d, "uuid"))
		}
	}
	if len(uuids) != 2 {
		t.Fatalf("node %s publishes %d devices, want 2", node.Name, len(uuids))
	}
	slices.Sort(uuids)
	class := e.classFor("node-server", `device.attributes["gpufrac.dev"].mpsServerScope == "node"`)
	e.createTemplate(claimTemplate("pair-20g", class, "20Gi", 2, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\ncomputeMode: TimeSlicing\nmemoryLimit: 30Gi\n"))
	e.createPod("pair", "pair-20g", node.Name)
	pod := e.waitRunning("pair")
	claim := e.claimOf(pod)
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 2 || results[0].Device == results[1].Device {
		t.Fatalf("allocated %v, want shares of two GPUs", results)
	}

	daemons := func() []v1.Pod {
		list, err := e.client.CoreV1().Pods(harness.MPSNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/node=" + node.Name})
		if err != nil {
			t.Fatalf("listing MPS daemon Pods: %v", err)
		}
		return list.Items
	}
	ds := daemons()
	if len(ds) != 1 || ds[0].Labels["gpufrac.dev/gpu"] != "node" {
		t.Fatalf("want the one node server on %s, got %d daemon Pods: %+v", node.Name, len(ds), ds)
	}
	both := strings.Join(uuids, ",")
	if got := ds[0].Annotations[mps.AnnotationServerGPUs]; got != both {
		t.Errorf("the node server says it serves %q, want %q", got, both)
	}
	for _, c := range ds[0].Spec.Containers {
		for _, env := range c.Env {
			if env.Name == "CUDA_VISIBLE_DEVICES" && env.Value != both {
				t.Errorf("daemon container %s sees CUDA_VISIBLE_DEVICES=%q, want %q", c.Name, env.Value, both)
			}
		}
	}
	if !slices.ContainsFunc(ds[0].Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.PodReady && c.Status == v1.ConditionTrue }) {
		t.Errorf("the node server is not Ready: %+v", ds[0].Status)
	}

	c := record(t, node, e.ns, "pair").Containers[0]
	var gpus []string
	for _, r := range results {
		gpus = append(gpus, stringAttr(e.device(node.Name, r.Device), "uuid"))
	}
	visible, _ := c.EnvValue("NVIDIA_VISIBLE_DEVICES")
	if got := strings.Split(visible, ","); !sameElements(got, gpus) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want both GPUs %v", visible, gpus)
	}
	for name, want := range map[string]string{"GPUFRAC_GPU_MEMORY_REQUESTS": "20480,20480", "GPUFRAC_GPU_MEMORY_LIMITS": "30720,30720"} {
		if got, _ := c.EnvValue(name); got != want {
			t.Errorf("%s=%q, want %q (MiB per GPU)", name, got, want)
		}
	}
	if v, ok := c.EnvValue("CUDA_MPS_PIPE_DIRECTORY"); !ok || !slices.ContainsFunc(c.Mounts, func(m specs.Mount) bool { return m.Destination == v && strings.Contains(m.Source, "/mps/node/") }) {
		t.Errorf("CUDA_MPS_PIPE_DIRECTORY=%q is not the node server's pipe directory mounted: %+v", v, c.Mounts)
	}
	if v, ok := c.EnvValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); ok {
		t.Errorf("a client of the node server got CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q", v)
	}
	hook := ""
	if c.Hooks != nil {
		for _, h := range c.Hooks.CreateRuntime {
			if strings.HasSuffix(h.Path, "gpufrac-cdi-hook") {
				hook = strings.Join(h.Args, " ")
			}
		}
	}
	for _, g := range gpus {
		if want := fmt.Sprintf("%s=%d:%d", g, int64(20)<<30, int64(30)<<30); !strings.Contains(hook, want) {
			t.Errorf("the enforcement hook %q lacks %s", hook, want)
		}
	}

	e.deletePod("pair")
	e.poll("the node server to go with its last claim", func() (bool, error) {
		if n := len(daemons()); n != 0 {
			return false, fmt.Errorf("%d daemon Pods left", n)
		}
		return true, nil
	})
}

func sameElements(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
