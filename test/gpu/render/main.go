// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command render prints the MPS daemon container's script and startup
// probe from templates/mps-control-daemon.yaml, rendered by internal/node/mps exactly
// as the plugin renders it, for test/gpu/run.sh to run without Kubernetes.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/pkg/domain"
	"github.com/gpufrac/gpufrac/templates"
)

func main() {
	version := flag.String("version", "legacy", "MPS version: legacy or v3")
	uuid := flag.String("uuid", "", "GPU UUID; a comma-separated list renders a node server over those GPUs")
	part := flag.String("part", "script", "what to print: script, init (the init container's command), probe, toml (the v3 daemon's configuration) or server-reserve (the default MPS server reserve, MiB)")
	driver := flag.String("driver", "615.0", "driver version, for -part toml")
	flag.Parse()
	// A list is the node server's, as the plugin renders it.
	key, gpus := *uuid, strings.Split(*uuid, ",")
	if len(gpus) > 1 {
		key = mpslayout.NodeServerKey
	}
	pod, err := mps.Render(templates.MPSControlDaemon, mps.DaemonParams{
		Name: "gpu-check", Namespace: "gpu-check", NodeName: "gpu-check", GPUUUID: *uuid, DaemonKey: key, GPUs: gpus, Image: "none", Version: *version,
		PipeDir: "/unused", LogDir: "/unused", ShmDir: "/unused", ConfigDir: "/unused", ServerName: mpslayout.ServerName, DriverRoot: "/unused",
		SafetyMemoryMiB: mps.DefaultSafetyLimits.PinnedMemoryMiB, SafetyThreadPercentage: mps.DefaultSafetyLimits.ActiveThreadPercentage,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	c := pod.Spec.Containers[0]
	switch *part {
	case "script":
		fmt.Println(c.Args[len(c.Args)-1])
	case "init":
		for _, a := range pod.Spec.InitContainers[0].Command {
			fmt.Printf("%q ", a)
		}
		fmt.Println()
	case "toml":
		toml, err := mps.DaemonTOML(*driver, mpslayout.ServerName, strings.Split(*uuid, ",")...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "render:", err)
			os.Exit(1)
		}
		fmt.Print(toml)
	case "server-reserve":
		fmt.Println(domain.DefaultServerReserveMiB)
	case "probe":
		fmt.Println(c.StartupProbe.Exec.Command[len(c.StartupProbe.Exec.Command)-1])
	default:
		fmt.Fprintln(os.Stderr, "render: unknown -part", *part)
		os.Exit(2)
	}
}
