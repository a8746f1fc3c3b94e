// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command release builds a gpufrac release's artefacts into a directory
// (`make release VERSION=x.y.z`: bin/release/<version>/); hack/release
// says what and how they are pinned.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/release"
)

func main() {
	version := flag.String("version", "", "the release's version, SemVer without a leading v (required)")
	out := flag.String("out", "", "output directory (default bin/release/<version>)")
	arches := flag.String("image-arches", defaultArches(), "comma-separated image architectures")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *version, *out, strings.Split(*arches, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, version, out string, arches []string) error {
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(root, "bin", "release", version)
	}
	opts := release.Options{RepoRoot: root, Version: version, OutDir: out, ImageArches: arches, Progress: os.Stdout}
	if runtime.GOARCH == "amd64" && slices.Contains(arches, "arm64") {
		if opts.CrossRoot = os.Getenv(release.CrossEnv); opts.CrossRoot == "" {
			if opts.CrossRoot, err = release.CrossCacheDir(); err != nil {
				return err
			}
			if err := release.FetchCross(ctx, os.Stdout, opts.CrossRoot); err != nil {
				return err
			}
		}
	}
	sums, err := release.Build(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("%s (%s):\n%s", out, release.Checksums, release.SumsFile(sums))
	return nil
}

// defaultArches are amd64 and arm64 from an amd64 machine (arm64 with the
// cross compiler FetchCross brings), this machine's architecture elsewhere.
func defaultArches() string {
	if runtime.GOARCH == "amd64" {
		return "amd64,arm64"
	}
	return runtime.GOARCH
}
