// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command kubectl-gpufrac is the kubectl plugin of gpufrac.dev
// (`kubectl gpufrac ...`); the commands live in internal/cli.
package main

import (
	"os"

	"github.com/gpufrac/gpufrac/internal/cli"
)

func main() {
	streams := cli.StdStreams()
	err := cli.NewRootCommand(streams).Execute()
	os.Exit(cli.ExitCode(err, streams.ErrOut))
}
