// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// liftSchedulerConfig sets clientConnection.qps and burst in a
// KubeSchedulerConfiguration to what -qps gives the flags otherwise: with
// --config, kube-scheduler ignores --kube-api-qps and --kube-api-burst
// (source: cmd/kube-scheduler/app/options/options.go, Options.ApplyTo), and
// its configuration defaults (qps 50, burst 100) would make the API rate
// limit what is measured. Values the file sets are kept.
func liftSchedulerConfig(config []byte, qps int) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("-scheduler-config: %w", err)
	}
	if doc == nil {
		return nil, fmt.Errorf("-scheduler-config: empty document")
	}
	conn := map[string]any{}
	switch c := doc["clientConnection"].(type) {
	case nil:
	case map[string]any:
		conn = c
	default:
		return nil, fmt.Errorf("-scheduler-config: clientConnection is a %T: want a mapping", c)
	}
	if _, ok := conn["qps"]; !ok {
		conn["qps"] = qps
	}
	if _, ok := conn["burst"]; !ok {
		conn["burst"] = 2 * qps
	}
	doc["clientConnection"] = conn
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("-scheduler-config: %w", err)
	}
	return out, nil
}

// extenderWeight multiplies the extender's 0-10 score (scaled by 10 to the
// plugins' 0-100; source: schedule_one.go, prioritizeNodes). One level is
// then 30 points, against NodeResourcesFit's least-allocated differences of
// one or two points and no DRA score (docs/design/packing.md), so the
// extender's order decides among feasible nodes.
const extenderWeight = 3

// extenderTimeout bounds each prioritize call: the scheduler waits for it
// in every scheduling cycle, and an ignorable extender that times out only
// loses its score for that pod (source: schedule_one.go, prioritizeNodes
// logs and skips an ignorable extender's error).
const extenderTimeout = "1s"

// withExtender adds gpufrac-controller's prioritize verb at urlPrefix to a
// KubeSchedulerConfiguration (a minimal one when config is empty): ignorable
// with a short httpTimeout, so a dead controller never blocks scheduling,
// and nodeCacheCapable, so the scheduler sends node names, not Node objects.
func withExtender(config []byte, urlPrefix string) ([]byte, error) {
	doc := map[string]any{}
	if len(config) > 0 {
		if err := yaml.Unmarshal(config, &doc); err != nil {
			return nil, fmt.Errorf("-scheduler-config: %w", err)
		}
		if doc == nil {
			return nil, fmt.Errorf("-scheduler-config: empty document")
		}
	} else {
		doc["apiVersion"], doc["kind"] = "kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"
	}
	var extenders []any
	switch e := doc["extenders"].(type) {
	case nil:
	case []any:
		extenders = e
	default:
		return nil, fmt.Errorf("-scheduler-config: extenders is a %T: want a list", e)
	}
	doc["extenders"] = append(extenders, map[string]any{
		"urlPrefix":        urlPrefix,
		"prioritizeVerb":   "prioritize",
		"weight":           extenderWeight,
		"nodeCacheCapable": true,
		"ignorable":        true,
		"httpTimeout":      extenderTimeout,
		"enableHTTPS":      false,
	})
	return yaml.Marshal(doc)
}
