// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/node/runtimeconfig"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// EventVisibleDevicesEnvvarAccepted is the reason of the Warning Event on
// the Node when the NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES from
// unprivileged containers.
const EventVisibleDevicesEnvvarAccepted = "NVIDIAVisibleDevicesEnvvarAccepted"

// checkRuntimeConfig reads the host's NVIDIA runtime configuration
// (cfg.NVIDIARuntimeConfig) into inv, for the slices' attribute, and logs
// what it found.
func checkRuntimeConfig(ctx context.Context, cfg Config, inv *domain.Inventory) runtimeconfig.Report {
	r := runtimeconfig.Read(cfg.NVIDIARuntimeConfig)
	inv.VisibleDevicesEnvvar = r.Envvar
	logger := klog.FromContext(ctx)
	switch {
	case r.Err != nil:
		logger.V(2).Info("Cannot tell whether the NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES from unprivileged pods", "reason", r.Err.Error())
	case r.Envvar == domain.VisibleDevicesEnvvarAccepted:
		logger.Info("The NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES from unprivileged pods: any pod on this node can name GPUs past the scheduler; set "+runtimeconfig.AcceptEnvvarKey+" = false (docs/install.md)",
			"path", r.Path, "explicit", r.Explicit)
	default:
		logger.V(2).Info("The NVIDIA runtime ignores NVIDIA_VISIBLE_DEVICES from unprivileged pods", "path", r.Path)
	}
	return r
}

// reportRuntimeConfig puts a Warning Event on the Node where the runtime
// accepts the variable: `kubectl describe node` shows the side door.
func (p *Plugin) reportRuntimeConfig(r runtimeconfig.Report) {
	if r.Envvar != domain.VisibleDevicesEnvvarAccepted {
		return
	}
	// The node's UID is not known here; the Event names the node, which is
	// how kubectl describe node finds it.
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.cfg.NodeName}}
	p.events.recorder.Eventf(node, nil, v1.EventTypeWarning, EventVisibleDevicesEnvvarAccepted, "CheckRuntimeConfig", "%s",
		safetext.Cap(r.Message(), maxNoteBytes))
}
