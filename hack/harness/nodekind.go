// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"slices"
)

// RestartPluginWith restarts the plugin with the node's own flags followed
// by extra (a later flag wins), so a test can make the node another kind of
// node for a while: an older driver (--simulate-enforcement=mps), a GPU
// Operator driver root (--driver-root). With no extra flags it restores the
// node's own.
func (n *RealNode) RestartPluginWith(ctx context.Context, extra ...string) error {
	n.mu.Lock()
	if n.basePluginArgs == nil {
		n.basePluginArgs = slices.Clone(n.pluginArgs)
	}
	n.pluginArgs = append(slices.Clone(n.basePluginArgs), extra...)
	n.mu.Unlock()
	return n.RestartPlugin(ctx)
}
