// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"math"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpufrac/gpufrac/internal/cli/status"
)

// usageQuery sums each claim's containers on each GPU: the map draws a
// claim's use of a GPU, and a claim may serve several containers.
const usageQuery = "sum by (node, gpu_uuid, claim_uid) (gpufrac_container_gpu_memory_used_bytes)"

// usageTimeout bounds the one query: a Prometheus that does not answer
// must not hold the map, which is drawn without usage then.
const usageTimeout = 30 * time.Second

// queryUsage asks the Prometheus at address, once, for the memory each
// claim uses on each GPU (usageQuery, evaluated now).
func queryUsage(ctx context.Context, address string) (status.Usage, error) {
	client, err := promapi.NewClient(promapi.Config{Address: address})
	if err != nil {
		return nil, fmt.Errorf("--prometheus-url %q: %w", address, err)
	}
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	value, _, _, err := promv1.NewAPI(client).Query(ctx, usageQuery, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", usageQuery, err)
	}
	vector, ok := value.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: the result is a %s, want a vector", usageQuery, value.Type())
	}
	usage := status.Usage{}
	for _, s := range vector {
		key := status.UsageKey{Node: string(s.Metric["node"]), GPU: string(s.Metric["gpu_uuid"]),
			ClaimUID: string(s.Metric["claim_uid"])}
		v := float64(s.Value)
		// A series without the three labels names no share; a value that
		// is no byte count is not drawn as one.
		if key.Node == "" || key.GPU == "" || key.ClaimUID == "" || math.IsNaN(v) || v < 0 || v > math.MaxInt64/2 {
			continue
		}
		usage[key] = int64(v)
	}
	return usage, nil
}
