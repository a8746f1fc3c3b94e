// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
)

// Fragmentation is the fragmentation report of every GPU pool of the
// cluster (internal/core/fragmentation, as the controller's metric): moves
// may cross nodes, so it covers every node whatever --node shows.
func Fragmentation(slices []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim) []fragmentation.Pool {
	sp := make([]*resourceapi.ResourceSlice, len(slices))
	for i := range slices {
		sp[i] = &slices[i]
	}
	cp := make([]*resourceapi.ResourceClaim, len(claims))
	for i := range claims {
		cp[i] = &claims[i]
	}
	return fragmentation.Analyze(fragmentation.Collect(sp, cp))
}
