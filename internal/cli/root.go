// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cli is the command tree of the kubectl plugin
// kubectl-gpufrac. Each subcommand lives in its own file and is added to the
// root in NewRootCommand; the logic it drives lives in its own package
// (validate: internal/manifestcheck), so this package only parses flags, reads
// input and prints.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

// IOStreams are where commands read and write, so that tests can run them
// without a terminal.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// rawOut is Out before safetext wraps it: only the memory map writes
	// to it, coloured, on a terminal, having escaped every name itself.
	rawOut io.Writer
}

// StdStreams are the process's own streams.
func StdStreams() IOStreams {
	return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// ExitError ends the command with a status code and nothing more to say:
// the command has already printed what went wrong (for validate, one line
// per problem), so main must not print it again, nor cobra its usage.
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// NewRootCommand builds `kubectl gpufrac` with all its subcommands.
func NewRootCommand(streams IOStreams) *cobra.Command {
	return newRootCommand(streams, kubeconfigClient)
}

func newRootCommand(streams IOStreams, clientFor clientFunc) *cobra.Command {
	// Every command prints names and messages taken from manifests and the
	// cluster: none may act on the terminal (safetext).
	streams.rawOut = streams.Out
	streams.Out, streams.ErrOut = safetext.Writer(streams.Out), safetext.Writer(streams.ErrOut)
	root := &cobra.Command{
		Use:   "kubectl-gpufrac",
		Short: "Work with gpufrac.dev fractional GPU claims",
		Long: "kubectl gpufrac works with the claims and DeviceClasses of the gpufrac.dev DRA driver:\n" +
			"memory-enforced fractions of GPUs, with a guaranteed request, a burstable limit and a\n" +
			"compute mode (TimeSlicing or SMSharing).",
		Annotations: map[string]string{
			// Installed as a kubectl plugin, it is invoked as `kubectl gpufrac`.
			cobra.CommandDisplayNameAnnotation: "kubectl gpufrac",
		},
		// Errors are printed once, by main (see ExitCode); usage is for
		// --help and for mistakes in flags, not for problems in manifests.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	// kubectl's flags for reaching a cluster (see cluster.go).
	access := genericclioptions.NewConfigFlags(true)
	access.AddFlags(root.PersistentFlags())
	// The default is the user's own ($HOME/.kube/cache); said so, the help
	// and the generated reference (docs/reference.md) do not depend on who
	// ran them. The value itself is unchanged.
	if f := root.PersistentFlags().Lookup("cache-dir"); f != nil {
		f.DefValue = "$HOME/.kube/cache"
	}
	root.AddCommand(newValidateCommand(streams), newTranslateCommand(streams), newSimulateCommand(streams),
		newStatusCommand(streams, access, clientFor), newWhyCommand(streams, access, clientFor))
	return root
}

// maxErrorBytes caps the one error line main prints.
const maxErrorBytes = 4096

// ExitCode maps the error of Execute to the process's exit status, and
// prints it unless the command has already reported (ExitError).
func ExitCode(err error, errOut io.Writer) int {
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	fmt.Fprintf(errOut, "error: %s\n", safetext.Escape(safetext.Cap(err.Error(), maxErrorBytes)))
	return 1
}
