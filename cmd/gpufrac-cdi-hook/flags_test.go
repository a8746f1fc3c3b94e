// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io"
	"strings"
	"testing"
)

// TestFlagsRefusedAtStart: a path the hook would resolve against the
// runtime's working directory is refused before the hook reads its state,
// with the flag, the value and the rule (issue 34).
func TestFlagsRefusedAtStart(t *testing.T) {
	gpu := "--gpu=GPU-0=1073741824:1073741824"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"apply", gpu, "--driver-root", "run/nvidia/driver"}, `--driver-root "run/nvidia/driver": must be an absolute path`},
		{[]string{"apply", gpu, "--proc-root", "proc"}, `--proc-root "proc": must be an absolute path`},
		{[]string{"apply", gpu, "--cgroup-root", "./cgroup"}, `--cgroup-root "./cgroup": must be an absolute path`},
		{[]string{"install", "--dir", "bin"}, `--dir "bin": must be an absolute path`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// A relative --dir that slipped through lands here, not in the tree.
			t.Chdir(t.TempDir())
			cmd := newCommand()
			cmd.SetArgs(tc.args)
			cmd.SetIn(strings.NewReader(""))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
