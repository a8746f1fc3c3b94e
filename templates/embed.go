// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package templates holds the workload templates the plugin renders, embedded
// so the binary carries them; the Helm chart may override them from a
// ConfigMap (--mps-template).
package templates

import (
	_ "embed"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// MPSControlDaemon is templates/mps-control-daemon.yaml: the Pod that runs
// one GPU's MPS control daemon.
//
//go:embed mps-control-daemon.yaml
var MPSControlDaemon string

// DeviceClasses is templates/deviceclasses.yaml: the DeviceClasses gpufrac
// ships (demo/deviceclasses.yaml links to it).
//
//go:embed deviceclasses.yaml
var DeviceClasses string

// DeviceClassObjects parses DeviceClasses, for code that places claims
// without an API server (the simulator, tests).
func DeviceClassObjects() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, doc := range strings.Split(DeviceClasses, "\n---\n") {
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
			return nil, fmt.Errorf("the built-in DeviceClasses: %w", err)
		}
		out = append(out, &c)
	}
	return out, nil
}
