// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mustrun decides what a test does when a tool it needs (gcc,
// ldd, ldconfig, make, root) is missing: it skips on a developer's
// machine, and fails where the tests must run (GPUFRAC_E2E=required, as
// .ci/run sets it as root), so CI cannot pass with a check silently left
// out.
package mustrun

import (
	"os"
	"testing"
)

// Required tells whether this run must not skip for a missing tool.
func Required() bool { return os.Getenv("GPUFRAC_E2E") == "required" }

// Need skips t, or fails it where the tests must run, when have is false;
// what names the missing tool and what needs it. Either way it does not
// return when have is false (testing's Skip and Fatalf end the test).
func Need(t testing.TB, have bool, what string) {
	t.Helper()
	if have {
		return
	}
	if Required() {
		t.Fatalf("GPUFRAC_E2E=required, but this test cannot run: %s", what)
		return
	}
	t.Skip(what)
}

// NeedRoot is Need for a test that only root can run.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "root only: "+why)
}
