// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
)

// compare is the -packing mode that measures off and on in turn on one
// cluster: the "throughput on vs off, same run, same cluster".
// Separate runs start separate control planes, whose speed on a shared
// machine differs by more than the mechanism's cost (docs/benchmarks.md).
const compare = "compare"

// roundModes is the order of a round's phases: off first in odd rounds, on
// first in even ones, so that neither mode always runs on the cluster the
// other has just warmed (caches, connections) or loaded (deletions the
// API server and etcd still compact).
func roundModes(round int, on string) []string {
	if round%2 == 1 {
		return []string{"off", on}
	}
	return []string{on, "off"}
}

// settleAfterReset is how long the cluster rests after a reset before the
// next phase: the scheduler and the controller-manager see the last
// deletions by watch, a little after the API server reports them gone, and
// work through them. Measured at 64 nodes: with 2 s, the on phases that
// followed an off phase used 96 and 97 GPUs where the others used 86 (the
// labels lagged behind a busy API server); with 6 s, 86 or 87 in 15 of 17,
// 93 and 94 in the other two (docs/design/packing.md).
const settleAfterReset = 6 * time.Second

// reset puts the cluster back as setUp left it after a phase of mode: no
// pods and no claims in the namespace, and, after packing on, the packing
// webhook no longer called and no node labelled, as on a cluster where
// gpufrac-controller never ran (its next start labels the nodes afresh, as
// the first one did).
func (b *bench) reset(ctx context.Context, mode string) error {
	if mode != "off" {
		if err := b.cp.WaitPackingGone(ctx, namespace, b.fractionTemplate()); err != nil {
			return err
		}
		if err := b.clearPackingLabels(ctx); err != nil {
			return err
		}
	}
	grace := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	// A loaded API server can drop a large delete (a stream error): it is
	// retried, as what it already deleted stays deleted.
	var delErr error
	for range 3 {
		if delErr = b.client.CoreV1().Pods(namespace).DeleteCollection(ctx, grace, metav1.ListOptions{}); delErr == nil {
			break
		}
	}
	if delErr != nil {
		return fmt.Errorf("deleting the phase's pods: %w", delErr)
	}
	// The controller-manager deletes claims generated for pods that are
	// gone; deleting them here too does not wait for it. Their
	// delete-protection finalizer is its to remove once no pod holds them.
	for range 3 {
		if delErr = b.client.ResourceV1().ResourceClaims(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); delErr == nil {
			break
		}
	}
	if delErr != nil {
		return fmt.Errorf("deleting the phase's claims: %w", delErr)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, nil // retried until the timeout
		}
		claims, err := b.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, nil // retried until the timeout
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the phase's pods and claims to be gone: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleAfterReset):
		return nil
	}
}

// clearPackingLabels removes the packing labels from every node.
func (b *bench) clearPackingLabels(ctx context.Context) error {
	nodes, err := b.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		// The controller's own patch for a node that should carry none.
		patch := nodelabel.Patch(&n, nodelabel.Labels{})
		if patch == nil {
			continue
		}
		if _, err := b.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("clearing node %s packing labels: %w", n.Name, err)
		}
	}
	return nil
}

// comparison sums up a compare run: per round, on's pods per second over
// off's.
type comparison struct {
	Packing string    `json:"packing"`
	Nodes   int       `json:"nodes"`
	Total   int       `json:"total"`
	Rounds  int       `json:"rounds"`
	Ratios  []float64 `json:"ratios"`
	// MedianRatio is the median of Ratios (the lower middle one of an
	// even count); MinRatio the lowest.
	MedianRatio float64 `json:"medianRatio"`
	MinRatio    float64 `json:"minRatio"`
	// CPURatios are, per round, on's CPU-seconds per scheduled pod
	// (kube-apiserver, kube-scheduler and this process, which runs
	// gpufrac-controller) over off's: the mechanism's cost, which a shared
	// machine disturbs less than pods per second. MedianCPURatio is their
	// median (the mean of the two middle ones of an even count), MaxCPURatio
	// the highest. OnFirst says, per round, whether on ran first.
	CPURatios      []float64 `json:"cpuRatios,omitempty"`
	MedianCPURatio float64   `json:"medianCPURatio,omitempty"`
	MaxCPURatio    float64   `json:"maxCPURatio,omitempty"`
	OnFirst        []bool    `json:"onFirst,omitempty"`
}

// compareResults pairs each round's off and on phases.
func compareResults(results []*result) (*comparison, error) {
	if len(results) == 0 {
		return nil, fmt.Errorf("no phase ran")
	}
	c := &comparison{Packing: compare, Nodes: results[0].Nodes, Total: results[0].Total}
	byRound := map[int]map[string]*result{}
	var rounds []int
	for _, r := range results {
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]*result{}
			rounds = append(rounds, r.Round)
		}
		mode := "on" // on, webhook, or either opted out
		if r.Packing == "off" {
			mode = "off"
		}
		byRound[r.Round][mode] = r
	}
	for _, round := range rounds {
		off, on := byRound[round]["off"], byRound[round]["on"]
		if off == nil || on == nil || off.PodsPerSecond == 0 {
			continue
		}
		c.Ratios = append(c.Ratios, on.PodsPerSecond/off.PodsPerSecond)
		c.OnFirst = append(c.OnFirst, round%2 == 0)
		if off.CPUPerPod > 0 && on.CPUPerPod > 0 {
			c.CPURatios = append(c.CPURatios, round3(on.CPUPerPod/off.CPUPerPod))
		}
	}
	if len(c.Ratios) == 0 {
		return nil, fmt.Errorf("no round has both phases with pods placed")
	}
	c.Rounds = len(c.Ratios)
	sorted := slices.Clone(c.Ratios)
	slices.Sort(sorted)
	c.MedianRatio, c.MinRatio = sorted[(len(sorted)-1)/2], sorted[0]
	if n := len(c.CPURatios); n > 0 {
		cpu := slices.Clone(c.CPURatios)
		slices.Sort(cpu)
		c.MedianCPURatio, c.MaxCPURatio = round3((cpu[(n-1)/2]+cpu[n/2])/2), cpu[n-1]
	}
	return c, nil
}

// printProgress reports a finished phase on stderr while a comparison
// runs.
func printProgress(r *result) {
	fmt.Fprintf(os.Stderr, "realsched: round %d, packing %s: %d/%d placed on %d GPUs (lower bound %d), %.1f pods/s, %.3f ms CPU a pod (API server %.2f s, scheduler %.2f s, realsched %.2f s), load %.1f\n",
		r.Round, r.Packing, r.Placed, r.Total, r.GPUsUsed, r.LowerBound, r.PodsPerSecond, 1000*r.CPUPerPod,
		r.CPUSeconds["kube-apiserver"], r.CPUSeconds["kube-scheduler"], r.CPUSeconds[benchProcess], r.LoadAverage)
}
