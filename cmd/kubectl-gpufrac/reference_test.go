// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/gpufrac/gpufrac/internal/cli"
	"github.com/gpufrac/gpufrac/test/docs"
)

// TestReference: docs/reference.md lists the commands and flags
// kubectl-gpufrac has now.
func TestReference(t *testing.T) {
	docs.CheckSection(t, "../../docs/reference.md", "kubectl-gpufrac", docs.Commands(cli.NewRootCommand(cli.StdStreams())))
}
