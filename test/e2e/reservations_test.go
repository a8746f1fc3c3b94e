// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// TestRootReservationStaysZero: containers with a 10Gi guarantee end in
// the three ways a container ends (stopped by the kubelet when its pod is
// deleted, exited by itself, OOM-killed), each leaving its cgroup removed
// with the soft limit still set, which on a real dmem node leaks into
// every ancestor's reservation (docs/design/nvidia/memory-limits.md). gpufrac
// follows NVIDIA's deployment model "force the root reservation to 0 after
// every set-limits call": after each new container's hook, the simulated
// reservation of the root (the highest cgroup below the hierarchy's mount
// on the container's path, cdihook.ReservationRoot) is 0, and the new
// container's own cgroup holds its guarantee. 50 containers: 17 stopped or
// still running, 17 exited, 16 OOM-killed.
func TestRootReservationStaysZero(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("r10", e.classFor(6), "10Gi", "")
	const soft = 10 * gib
	started := 0
	var running []string
	check := func(latest *v1.Pod) {
		t.Helper()
		g := e.gpuOf(latest)
		r := e.checkHook(latest, g, soft, soft)
		i := strings.Index(r.Cgroup, "/kubepods/")
		if i < 0 {
			t.Fatalf("container cgroup %s is not under a kubepods cgroup", r.Cgroup)
		}
		kubepods := r.Cgroup[:i+len("/kubepods")]
		records, err := node.LimitRecords()
		if err != nil {
			t.Fatal(err)
		}
		var root string
		for _, rec := range records {
			if rec.UUID == g.UUID && rec.Soft == 0 && strings.HasPrefix(r.Cgroup, rec.Cgroup+"/") {
				root = rec.Cgroup
			}
		}
		if root == "" || !strings.HasPrefix(kubepods+"/", root+"/") {
			t.Fatalf("no reset of a root at or above %s on GPU %s in the hook's NVML calls", kubepods, g.UUID)
		}
		reserved := gpusim.Reservations(records, "/")[g.UUID]
		t.Logf("%d containers started, %d running: root %s reserves %dGi, %s %dGi (leaks below the root)", started, len(running), root, reserved[root]>>30, kubepods, reserved[kubepods]>>30)
		if reserved[root] != 0 {
			t.Errorf("root %s reserves %dGi on GPU %s after the hook, want 0", root, reserved[root]>>30, g.UUID)
		}
		if reserved[r.Cgroup] != uint64(soft) {
			t.Errorf("container %s reserves %dGi, want its 10Gi", r.Cgroup, reserved[r.Cgroup]>>30)
		}
	}
	startProbe := func(name string) {
		e.createPod(probePod(name, "r10"))
		pod := e.waitRunning(name)
		started++
		running = append(running, name)
		check(pod)
	}
	runToEnd := func(name string, command []string, memLimit string, wantReason string) {
		pod := probePod(name, "r10")
		pod.Spec.RestartPolicy = v1.RestartPolicyNever
		pod.Spec.Containers[0].Command = command
		if memLimit != "" {
			pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse(memLimit)}
		}
		e.createPod(pod)
		var last *v1.Pod
		err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed, nil
		})
		if err != nil {
			t.Fatalf("pod %s did not end: %v (%+v)", name, err, last.Status)
		}
		started++
		st := last.Status.ContainerStatuses
		if len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.Reason != wantReason {
			t.Errorf("pod %s ended %+v, want reason %s", name, st, wantReason)
		}
	}
	for round := range 16 {
		startProbe(fmt.Sprintf("run%d", round))
		runToEnd(fmt.Sprintf("exit%d", round), []string{"sh", "-c", "sleep 0.2"}, "", "Completed")
		// A string that doubles until the memory cgroup's limit kills it.
		runToEnd(fmt.Sprintf("oom%d", round), []string{"sh", "-c", `a=aaaaaaaaaaaaaaaa; while :; do a="$a$a"; done`}, "24Mi", "OOMKilled")
		if round > 0 {
			name := running[0]
			e.deletePod(name)
			running = running[1:]
		}
	}
	runToEnd("exit-last", []string{"sh", "-c", "sleep 0.2"}, "", "Completed")
	startProbe("last")
	if started != 50 {
		t.Errorf("%d containers, want 50", started)
	}
}
