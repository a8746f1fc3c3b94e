// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// showBorrowing makes pod llm's container (40Gi guaranteed, 60Gi limit)
// use 50Gi through the simulated NVML's per-cgroup use, on the real node
// where the hook set its limits on its real cgroup, and prints the Warning
// Event the plugin puts on the claim and the pod and its incident counter.
// The stand-in runs no hooks, so there is no cgroup to report on.
func (r *reporter) showBorrowing(ctx context.Context, metricsAddr map[string]string) error {
	step("A borrowing container: pod llm uses 50Gi of its 40Gi request (60Gi limit)")
	if len(r.realNodes) == 0 {
		fmt.Println("    (needs the real node, where gpufrac-cdi-hook sets the container's limits on its cgroup: run as root on Linux)")
		return nil
	}
	pod, err := r.client.CoreV1().Pods(r.namespace).Get(ctx, "llm", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting pod llm: %w", err)
	}
	id := ""
	if len(pod.Status.ContainerStatuses) > 0 {
		id = strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	}
	for _, n := range r.realNodes {
		if n.Name != pod.Spec.NodeName || id == "" {
			continue
		}
		records, err := n.LimitRecords()
		if err != nil {
			return err
		}
		for _, rec := range records {
			if !strings.HasSuffix(rec.Cgroup, id) {
				continue
			}
			raw, _ := json.Marshal(map[string]map[string]uint64{rec.UUID: {rec.Cgroup: 50 << 30}})
			if err := os.WriteFile(filepath.Join(n.PluginDataDir, gpusim.UsageFile), raw, 0o644); err != nil {
				return err
			}
			fmt.Printf("    simulated NVML now reports 50Gi in use for cgroup %s on %s\n", rec.Cgroup, rec.UUID)
			return r.printIncidents(ctx, incident.Borrowing, metricsAddr[n.Name])
		}
	}
	fmt.Println("    (no hook record for pod llm's container: nothing to report on)")
	return nil
}
