// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// freeLocalAddress reserves a loopback port for a plugin's or the
// controller's metrics endpoint. Closing the listener before the server
// binds leaves a small race, acceptable for a demo: a clash fails the
// server's start loudly.
func freeLocalAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free loopback port for a metrics endpoint: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// fractionMetrics prints what the plugin on the pod's node exports about
// the pod's claim: its shares' request and limit, the usage series of its
// containers (where the hook has run them), and the GPU-wide figures of
// the GPUs it shares.
func (r *reporter) fractionMetrics(w io.Writer, podName, claimName string, metricsAddr map[string]string) error {
	pod, err := r.client.CoreV1().Pods(r.namespace).Get(r.ctx, podName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting pod %s: %w", podName, err)
	}
	claim, err := r.client.ResourceV1().ResourceClaims(r.namespace).Get(r.ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting claim %s: %w", claimName, err)
	}
	addr := metricsAddr[pod.Spec.NodeName]
	if addr == "" {
		return fmt.Errorf("pod %s runs on %q, which has no metrics endpoint", podName, pod.Spec.NodeName)
	}
	url := "http://" + addr + "/metrics"
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scraping %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	var lines, gpuUUIDs []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var all []string
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		all = append(all, line)
		if strings.Contains(line, `claim="`+claimName+`"`) || strings.Contains(line, `claim_uid="`+string(claim.UID)+`"`) {
			lines = append(lines, line)
			if u := labelValue(line, "gpu_uuid"); u != "" && !slices.Contains(gpuUUIDs, u) {
				gpuUUIDs = append(gpuUUIDs, u)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	if len(lines) == 0 {
		return fmt.Errorf("%s has no series for claim %s", url, claimName)
	}
	for _, line := range all {
		if strings.HasPrefix(line, "gpufrac_gpu_") && slices.Contains(gpuUUIDs, labelValue(line, "gpu_uuid")) {
			lines = append(lines, line)
		}
	}
	_, _ = fmt.Fprintf(w, "  %s (pod %s, claim %s):\n", url, podName, claimName)
	for _, l := range lines {
		_, _ = fmt.Fprintf(w, "    %s\n", l)
	}
	return nil
}

// labelValue extracts one label from a line of the Prometheus text format;
// the demo's label values contain no quotes.
func labelValue(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}
