package main

import (
	"testing"

	"github.com/gpufrac/gpufrac/pkg/kubectlcmd"
	"github.com/gpufrac/gpufrac/test/docs"
)

// TestReference: docs/reference.md lists the commands and flags
// kubectl-gpufrac has now.
func TestReference(t *testing.T) {
	docs.CheckSection(t, "../../docs/reference.md", "kubectl-gpufrac", docs.Commands(kubectlcmd.NewRootCommand(kubectlcmd.StdStreams())))
}
