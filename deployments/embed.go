// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package deployments carries the manifests gpufrac ships, each from its one
// source in this folder: the DeviceClasses (deviceclasses.yaml, which the
// demo applies and the simulator and tests place claims with) and the
// reference admission configuration (webhooks.yaml). The Helm chart
// (deployments/helm/gpufrac) renders copies of both; test/helm holds every
// copy equal to these files.
package deployments

import (
	_ "embed"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// DeviceClasses is deployments/deviceclasses.yaml: the DeviceClasses
// gpufrac ships.
//
//go:embed deviceclasses.yaml
var DeviceClasses string

// Webhooks is deployments/webhooks.yaml: the reference admission
// configuration of gpufrac-controller.
//
//go:embed webhooks.yaml
var Webhooks string

// WholeGPUDeviceClass is deployments/whole-gpu-deviceclass.yaml: the
// class that serves nvidia.com/gpu with whole gpufrac GPUs, off by default.
//
//go:embed whole-gpu-deviceclass.yaml
var WholeGPUDeviceClass string

// WholeGPUDeviceClassObject parses WholeGPUDeviceClass.
func WholeGPUDeviceClassObject() (*resourceapi.DeviceClass, error) {
	var c resourceapi.DeviceClass
	if err := yaml.UnmarshalStrict([]byte(WholeGPUDeviceClass), &c); err != nil {
		return nil, fmt.Errorf("the whole-GPU DeviceClass: %w", err)
	}
	return &c, nil
}

// DeviceClassObjects parses DeviceClasses, for code that places claims
// without an API server (the simulator, tests).
func DeviceClassObjects() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for doc, err := range yamldocs.All([]byte(DeviceClasses)) {
		if err != nil {
			return nil, fmt.Errorf("the built-in DeviceClasses: %w", err)
		}
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict(doc, &c); err != nil {
			return nil, fmt.Errorf("the built-in DeviceClasses: %w", err)
		}
		out = append(out, &c)
	}
	return out, nil
}
