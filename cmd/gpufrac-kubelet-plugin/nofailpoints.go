// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build !failpoints

package main

import "github.com/spf13/cobra"

// Production builds have no way to reach the preparer's failpoints: no
// flag, no hook (see failpoints.go, built only with -tags failpoints).
func addFailpointFlags(*cobra.Command) {}

func failpointHook() func(string) error { return nil }
