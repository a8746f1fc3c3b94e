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
