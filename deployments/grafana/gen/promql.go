// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import "fmt"

// The expressions the panels share. Per-GPU figures are summed by (node,
// gpu_uuid): every GPU metric has one series per GPU, and the sum drops the
// device label the container metrics lack, so the queries of a table merge
// into one row per GPU. Per-fraction figures join the container metrics to
// the share metrics on (node, gpu_uuid, claim_uid), the labels both carry.
var (
	gpuOffered    = byGPU("gpufrac_gpu_memory_total_bytes", gpuSel)
	gpuGuaranteed = byGPU("gpufrac_gpu_memory_guaranteed_bytes", gpuSel)
	gpuLimitSum   = byGPU("gpufrac_gpu_memory_limit_sum_bytes", gpuSel)
	gpuUsed       = byGPU("gpufrac_container_gpu_memory_used_bytes", gpuSel)

	// burstRoom is what the limits allow above the guarantees, up to the
	// GPU's memory: min(limit sum, offered) - guaranteed.
	burstRoom = fmt.Sprintf("clamp_min(((%s <= %s) or %s) - %s, 0)", gpuLimitSum, gpuOffered, gpuOffered, gpuGuaranteed)
	// freeBeyondLimits is memory no share may reach:
	// offered - max(limit sum, guaranteed). With burstRoom and
	// gpuGuaranteed it stacks to the GPU's memory.
	freeBeyondLimits = fmt.Sprintf("clamp_min(%s - ((%s >= %s) or %s), 0)", gpuOffered, gpuLimitSum, gpuGuaranteed, gpuGuaranteed)

	shareKeys    = "node, gpu_uuid, claim_uid, namespace, claim"
	shareRequest = fmt.Sprintf("sum by (%s) (gpufrac_fraction_memory_request_bytes{%s})", shareKeys, shareSel)
	shareLimit   = fmt.Sprintf("sum by (%s) (gpufrac_fraction_memory_limit_bytes{%s})", shareKeys, shareSel)
	// shareUsed is the memory of a share's containers, labelled with the
	// claim's namespace and name from the share metrics (group() is 1 per
	// share, so the product keeps the used bytes).
	shareUsed = fmt.Sprintf("sum by (node, gpu_uuid, claim_uid) (gpufrac_container_gpu_memory_used_bytes{%s}) * on (node, gpu_uuid, claim_uid) group_left (namespace, claim) group by (%s) (gpufrac_fraction_memory_request_bytes{%s})",
		shareSel, shareKeys, shareSel)
	usedOverRequest = fmt.Sprintf("(%s) / on (%s) %s", shareUsed, shareKeys, shareRequest)
	usedOverLimit   = fmt.Sprintf("(%s) / on (%s) %s", shareUsed, shareKeys, shareLimit)
)

func byGPU(metric, sel string) string {
	return fmt.Sprintf("sum by (node, gpu_uuid) (%s{%s})", metric, sel)
}

// quantile is a latency quantile of one of the plugin's histograms.
func quantile(q float64, metric string) string {
	return fmt.Sprintf("histogram_quantile(%g, sum by (le) (rate(%s_bucket[$__rate_interval])))", q, metric)
}
