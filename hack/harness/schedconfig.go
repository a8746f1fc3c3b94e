// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// schedulerConfigAPI is the only KubeSchedulerConfiguration version
// kube-scheduler v1.37 reads (kubescheduler.config.k8s.io/v1; documented:
// https://kubernetes.io/docs/reference/scheduling/config/).
const schedulerConfigAPI = "kubescheduler.config.k8s.io/v1"

// SchedulerConfig fills in the harness's side of a KubeSchedulerConfiguration:
// clientConnection.kubeconfig, the scheduler's credentials, which only the
// harness knows. With --config, kube-scheduler ignores --kubeconfig,
// --kube-api-qps and --kube-api-burst and honours only the leader-election
// flags (source: cmd/kube-scheduler/app/options/options.go, Options.ApplyTo),
// so everything else the caller wants, client QPS included, must be in the
// file. A kubeconfig the file already names is an error rather than
// overwritten: the scheduler would not reach this control plane with it.
func SchedulerConfig(config []byte, kubeconfig string) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("scheduler configuration: %w", err)
	}
	if doc == nil {
		return nil, fmt.Errorf("scheduler configuration: empty document")
	}
	if v, _ := doc["apiVersion"].(string); v != schedulerConfigAPI {
		return nil, fmt.Errorf("scheduler configuration: apiVersion %q: want %q", doc["apiVersion"], schedulerConfigAPI)
	}
	if k, _ := doc["kind"].(string); k != "KubeSchedulerConfiguration" {
		return nil, fmt.Errorf("scheduler configuration: kind %q: want KubeSchedulerConfiguration", doc["kind"])
	}
	conn := map[string]any{}
	switch c := doc["clientConnection"].(type) {
	case nil:
	case map[string]any:
		conn = c
	default:
		return nil, fmt.Errorf("scheduler configuration: clientConnection is a %T: want a mapping", c)
	}
	if k, ok := conn["kubeconfig"]; ok && k != "" && k != kubeconfig {
		return nil, fmt.Errorf("scheduler configuration: clientConnection.kubeconfig %q: leave it out, the harness fills it in", k)
	}
	conn["kubeconfig"] = kubeconfig
	doc["clientConnection"] = conn
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("scheduler configuration: %w", err)
	}
	return out, nil
}

// writeSchedulerConfig writes the final configuration into the scheduler's
// directory and returns the flag that passes it.
func (cp *ControlPlane) writeSchedulerConfig(kubeconfig string) (string, error) {
	out, err := SchedulerConfig(cp.opts.SchedulerConfig, kubeconfig)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cp.Dir, "kube-scheduler")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("scheduler configuration: %w", err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", fmt.Errorf("scheduler configuration: %w", err)
	}
	return "--config=" + path, nil
}
