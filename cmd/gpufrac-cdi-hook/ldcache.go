// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"

	"github.com/gpufrac/gpufrac/internal/hook/ldcachehook"
)

// newLDCacheCommand is the createContainer hook that adds the driver's
// library folders to the container's linker cache
// (internal/hook/ldcachehook).
func newLDCacheCommand() *cobra.Command {
	opts := ldcachehook.Options{}
	cmd := &cobra.Command{
		Use:   "ldcache --folder DIR [--folder ...] < OCI-state",
		Short: "Add the NVIDIA driver's library folders to the container's /etc/ld.so.cache and create their SONAME links (host ldconfig, chrooted)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ldcachehook.Run(cmd.InOrStdin(), opts)
		},
	}
	cmd.Flags().StringArrayVar(&opts.Folders, "folder", nil, "a folder of the driver's libraries, as the container sees it; once per folder")
	cmd.Flags().StringVar(&opts.DriverRoot, "driver-root", "/", "host root of the NVIDIA driver installation, whose ldconfig is preferred (/run/nvidia/driver with the GPU Operator)")
	cmd.Flags().StringVar(&opts.LDConfig, "ldconfig", "", "the host's ldconfig to run; default: the driver root's, else the host's (ldconfig.real first)")
	return cmd
}
