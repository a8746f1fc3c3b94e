// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package buildinfo holds the version string a release build stamps into
// every gpufrac binary, so that logs say which build is running (an upgrade
// or a rollback shows in the pods' first log line).
package buildinfo

// Version is set at link time:
//
//	go build -ldflags "-X github.com/gpufrac/gpufrac/internal/buildinfo.Version=0.1.0" ./cmd/...
//
// deployments/container/Dockerfile sets it from its VERSION build argument.
// A plain `go build` leaves "devel".
var Version = "devel"

// LDFlag is the -X linker flag that stamps version into a build.
func LDFlag(version string) string {
	return "-X github.com/gpufrac/gpufrac/internal/buildinfo.Version=" + version
}
