// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/gpufrac/gpufrac/test/docs"
)

// TestReference: docs/reference.md lists the flags this binary has now.
func TestReference(t *testing.T) {
	docs.ClearEnvOf(t, "main.go")
	docs.CheckSection(t, "../../docs/reference.md", "gpufrac-cdi-hook", docs.Commands(newCommand()))
}
