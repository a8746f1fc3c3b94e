// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command gpufrac-cdi-hook is the OCI createRuntime hook in gpufrac's CDI
// specs: it applies a container's GPU memory limits to its cgroup. The logic
// is in internal/hook/cdihook; this file is flags and wiring.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/internal/flagcheck"
	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/internal/sim/simdriver"
)

// maxErrorBytes bounds the hook's error message.
const maxErrorBytes = 4096

func main() {
	if err := newCommand().Execute(); err != nil {
		// The runtime shows this to the user as the container's error; one
		// built from a hostile state stays short and says what it cut.
		fmt.Fprintln(os.Stderr, "gpufrac-cdi-hook:", safetext.Cap(err.Error(), maxErrorBytes))
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	root := &cobra.Command{Use: "gpufrac-cdi-hook", SilenceUsage: true, SilenceErrors: true}
	var gpus []string
	var simulateRecord string
	opts := cdihook.Options{}
	apply := &cobra.Command{
		Use:   "apply --gpu UUID=SOFT:HARD [--gpu ...] < OCI-state",
		Short: "Apply per-container GPU memory limits (bytes) to the container's cgroup",
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The runtime chooses the hook's working directory: a
			// relative path would resolve against it.
			if err := flagcheck.All(flagcheck.AbsPath("--driver-root", opts.DriverRoot), flagcheck.AbsPath("--proc-root", opts.ProcRoot),
				flagcheck.AbsPath("--cgroup-root", opts.CgroupRoot), flagcheck.OptionalAbsPath("--simulate-record", simulateRecord)); err != nil {
				return err
			}
			for _, g := range gpus {
				l, err := hookarg.ParseLimit(g)
				if err != nil {
					return err
				}
				opts.Limits = append(opts.Limits, l)
			}
			// The library is found under --driver-root on every node and
			// loaded with dlopen, without cgo (this binary runs on the
			// host, whatever its glibc); a simulated node's driver root
			// holds its simulated driver.
			opts.Open = func(path string) (purenvml.Interface, error) { return purenvml.New(path), nil }
			if simulateRecord != "" {
				opts.Open = func(path string) (purenvml.Interface, error) { return simdriver.Open(path, simulateRecord) }
			}
			return cdihook.Run(cmd.InOrStdin(), opts)
		},
	}
	apply.Flags().StringArrayVar(&gpus, "gpu", nil, "UUID=SOFT:HARD limits in bytes, once per GPU")
	apply.Flags().StringVar(&opts.DriverRoot, "driver-root", "/", "host root of the NVIDIA driver installation, where libnvidia-ml.so.1 is loaded from (/run/nvidia/driver with the GPU Operator)")
	apply.Flags().StringVar(&opts.ProcRoot, "proc-root", "/proc", "where /proc is mounted")
	apply.Flags().StringVar(&opts.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup hierarchy is mounted")
	apply.Flags().StringVar(&opts.ClaimUID, "claim", "", "UID of the claim, for the metrics record")
	apply.Flags().StringVar(&opts.RecordDir, "record-dir", "", "where to record the container's cgroup for per-fraction metrics")
	apply.Flags().StringVar(&simulateRecord, "simulate-record", "", "simulated node: the library under --driver-root is its simulated driver, which records the limits it accepts to this file")
	var installDir string
	install := &cobra.Command{
		Use:   "install --dir DIR",
		Short: "Copy this binary into DIR on the host (the Helm chart's init container), replacing an older one atomically",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagcheck.AbsPath("--dir", installDir); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this binary: %w", err)
			}
			dst, err := cdihook.Install(self, installDir)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "installed", dst)
			return nil
		},
	}
	install.Flags().StringVar(&installDir, "dir", "", "directory to install into (the host directory of the plugin's --cdi-hook-path)")
	_ = install.MarkFlagRequired("dir")
	root.AddCommand(apply, install, newLDCacheCommand())
	return root
}
