// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command findinroot runs gpufrac's own lookup of driver-root binaries
// (launcher.FindInRoot, the one the plugin uses to decide whether a node
// can run MPS daemons) for test/gpu/run.sh, which compares it with where
// the binaries really are. Usage: findinroot ROOT NAME...; prints
// "NAME PATH" per binary found, the lookup's error per binary missing, and
// exits 1 if any is missing.
package main

import (
	"fmt"
	"os"

	"github.com/gpufrac/gpufrac/internal/node/mps/launcher"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: findinroot ROOT NAME...")
		os.Exit(2)
	}
	rc := 0
	for _, name := range os.Args[2:] {
		p, err := launcher.FindInRoot(os.Args[1], name)
		if err != nil {
			fmt.Println(err)
			rc = 1
			continue
		}
		fmt.Println(name, p)
	}
	os.Exit(rc)
}
