// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: Run must
// stop its servers, watches, certificate loop and event broadcaster on
// return.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}
