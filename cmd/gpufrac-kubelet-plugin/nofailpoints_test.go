// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !failpoints

package main

import (
	"io"
	"strings"
	"testing"
)

// TestDefaultBuildCannotReachFailpoints: the crash tests' self-kill hook is
// compiled only with -tags failpoints; a default build refuses the flag and
// gives the preparer no hook. (test/integration TestCrashAtEveryFailpoint
// also checks that the default plugin binary does not contain the flag's
// name at all.)
func TestDefaultBuildCannotReachFailpoints(t *testing.T) {
	cmd := newCommand()
	if f := cmd.Flags().Lookup("crash-at-failpoint"); f != nil {
		t.Fatalf("the default build has a --%s flag", f.Name)
	}
	cmd.SetArgs([]string{"--crash-at-failpoint=prepare-after-cdi-write", "--print-slices"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "unknown flag") {
		t.Errorf("--crash-at-failpoint in a default build: got %v, want an unknown flag error", err)
	}
	if failpointHook() != nil {
		t.Error("the default build gives the preparer a failpoint hook")
	}
}
