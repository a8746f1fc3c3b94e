// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// UsageMetric is the plugin's per-container GPU memory metric
// (internal/node/fractionmetrics).
const UsageMetric = "gpufrac_container_gpu_memory_used_bytes"

// ParseUsage reads the per-container memory in use from the plugin's
// /metrics (Prometheus text format); other metrics are skipped.
func ParseUsage(r io.Reader) ([]ContainerUsage, error) {
	var out []ContainerUsage
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if !strings.HasPrefix(text, UsageMetric+"{") {
			continue
		}
		labels, rest, err := parseLabels(text[len(UsageMetric)+1:])
		if err != nil {
			return nil, fmt.Errorf("line %d of the metrics: %w", line, err)
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("line %d of the metrics: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d of the metrics: value %q: %w", line, fields[0], err)
		}
		out = append(out, ContainerUsage{Namespace: labels["namespace"], Pod: labels["pod"], Container: labels["container"],
			ClaimUID: labels["claim_uid"], GPUUUID: labels["gpu_uuid"], UsedBytes: int64(v)})
	}
	return out, sc.Err()
}

// parseLabels reads `name="value",...}` and returns the labels and what
// follows the closing brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], nil
		}
		eq := strings.Index(s, `="`)
		if eq <= 0 {
			return nil, "", fmt.Errorf("malformed labels at %q", s)
		}
		name := s[:eq]
		s = s[eq+2:]
		var b strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		if i == len(s) {
			return nil, "", fmt.Errorf("unterminated value of label %s", name)
		}
		labels[name] = b.String()
		s = s[i+1:]
	}
}
