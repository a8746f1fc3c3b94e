// Package templates holds the workload templates the plugin renders, embedded
// so the binary carries them; the Helm chart may override them from a
// ConfigMap (--mps-template).
package templates

import _ "embed"

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
