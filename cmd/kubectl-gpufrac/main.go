// Command kubectl-gpufrac is the kubectl plugin of gpufrac.dev
// (`kubectl gpufrac ...`); the commands live in pkg/kubectlcmd.
package main

import (
	"os"

	"github.com/gpufrac/gpufrac/pkg/kubectlcmd"
)

func main() {
	streams := kubectlcmd.StdStreams()
	err := kubectlcmd.NewRootCommand(streams).Execute()
	os.Exit(kubectlcmd.ExitCode(err, streams.ErrOut))
}
