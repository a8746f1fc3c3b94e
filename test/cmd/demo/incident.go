package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/pkg/gpusim"
	"github.com/gpufrac/gpufrac/pkg/incident"
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
			return r.printIncident(ctx, pod.Name, metricsAddr[n.Name])
		}
	}
	fmt.Println("    (no hook record for pod llm's container: nothing to report on)")
	return nil
}

func (r *reporter) printIncident(ctx context.Context, pod, addr string) error {
	var notes []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := r.client.EventsV1().Events(r.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		notes = nil
		for _, ev := range list.Items {
			if ev.Reason == string(incident.Borrowing) {
				notes = append(notes, fmt.Sprintf("%s %s/%s %s: %s", ev.Type, ev.Regarding.Kind, ev.Regarding.Name, ev.Reason, ev.Note))
			}
		}
		return len(notes) >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the borrowing Events of pod %s: %w", pod, err)
	}
	fmt.Println("    Events:")
	for _, n := range notes {
		fmt.Println("      " + n)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return fmt.Errorf("scraping the plugin's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Println("    the plugin's counter:")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "gpufrac_incidents_total{") {
			fmt.Println("      " + line)
		}
	}
	return nil
}
