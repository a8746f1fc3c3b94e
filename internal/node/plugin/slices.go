// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"io"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// Slices discovers the GPUs of cfg and returns the ResourceSlices the plugin
// would publish, without registering or talking to the API server: what an
// operator checks before rolling the plugin out to a node.
func Slices(ctx context.Context, cfg Config) ([]*resourceapi.ResourceSlice, error) {
	_, resources, _, err := describeNode(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return resourceslices.Objects(v1alpha1.DriverName, resources), nil
}

// WriteSlices writes slices to w as a YAML stream, each a complete object
// (apiVersion and kind set) an operator can read or apply: the output of
// the plugin's --print-slices.
func WriteSlices(w io.Writer, slices []*resourceapi.ResourceSlice) error {
	for _, s := range slices {
		s.APIVersion, s.Kind = "resource.k8s.io/v1", "ResourceSlice"
		out, err := yaml.Marshal(s)
		if err != nil {
			return fmt.Errorf("rendering slice %s: %w", s.Name, err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", out); err != nil {
			return err
		}
	}
	return nil
}
