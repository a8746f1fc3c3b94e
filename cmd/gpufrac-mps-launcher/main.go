// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command gpufrac-mps-launcher runs a program of the node's NVIDIA driver
// root (nvidia-cuda-mps-control, nvidia-smi, the MPS daemon script's
// shell) from the plugin's distroless image: the MPS control daemon Pods
// (templates/mps-control-daemon.yaml) start every container and probe with
// it. The logic is in internal/node/mps/launcher; this file is flags and wiring.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpufrac/gpufrac/internal/flagcheck"
	"github.com/gpufrac/gpufrac/internal/node/mps/launcher"
)

func main() {
	fs := flag.NewFlagSet("gpufrac-mps-launcher", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gpufrac-mps-launcher [--driver-root DIR] [--bind-env NAME,...] -- PROGRAM [ARG...]")
		fs.PrintDefaults()
	}
	root := fs.String("driver-root", envOr("GPUFRAC_DRIVER_ROOT", launcher.DefaultDriverRoot),
		"where the host's NVIDIA driver root is mounted (env GPUFRAC_DRIVER_ROOT)")
	bind := fs.String("bind-env", strings.Join(launcher.DefaultBindEnv, ","),
		"variables naming directories to bind into the driver root; each is rewritten to its path there")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := flagcheck.AbsPath("--driver-root", *root); err != nil {
		fmt.Fprintln(os.Stderr, "gpufrac-mps-launcher:", err)
		os.Exit(2)
	}
	var names []string
	for n := range strings.SplitSeq(*bind, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	p, err := launcher.NewPlan(*root, os.Environ(), names)
	if err == nil {
		err = launcher.Exec(p, fs.Args())
	}
	fmt.Fprintln(os.Stderr, "gpufrac-mps-launcher:", err)
	os.Exit(1)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
