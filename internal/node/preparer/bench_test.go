// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// BenchmarkPrepareUnprepare measures one Prepare and one Unprepare of a
// fresh claim, the work the plugin does per pod start and stop: plan,
// three atomic checkpoint writes (no fsync, docs/reliability.md), the CDI
// spec, the unprepare's removals and its append to the log of pending
// status clears. Run with -cpu to compare the serial path with parallel
// claims: go test -bench PrepareUnprepare -cpu 1,2,4 ./internal/node/preparer
func BenchmarkPrepareUnprepare(b *testing.B) {
	t := &testing.T{}
	e := newEnvB(b, t)
	// As the status writer does once each clear is written.
	e.status.cleared = e.ckpt.StatusCleared
	ctx := klog.NewContext(b.Context(), klog.Background().V(1))
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			claim := allocated(fmt.Sprintf("c%d", i), fmt.Sprintf("gpu-%d", i%2), fmt.Sprintf("s%d", i), "1Gi", "")
			if _, err := e.preparer.Prepare(ctx, claim); err != nil {
				b.Error(err)
				return
			}
			ref := kubeletplugin.NamespacedObject{UID: types.UID("uid-" + claim.Name)}
			ref.Namespace, ref.Name = claim.Namespace, claim.Name
			if err := e.preparer.Unprepare(ctx, ref); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}
