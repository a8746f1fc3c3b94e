// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command prepcompare measures DRA kubelet plugins side by side the way the
// kubelet drives them: it starts the harness control plane (etcd and
// kube-apiserver v1.37.2 among others), creates one Node, starts each
// plugin binary in turn against it (client rate limits lifted), and calls
// NodePrepareResources and NodeUnprepareResources over the plugin's DRA
// socket with the kubelet's generated client, one claim per call, for
// rounds of allocated ResourceClaims that exist in the API server (each
// plugin's helper GETs them, as in a cluster); with -fresh-claims every
// round has new claims, deleted after their Unprepare as short jobs' are
// (a plugin cannot gain by re-preparing claims it knows). Plugins run alternately,
// -runs times each, so a machine that gets busier does not favour one.
//
//	go run ./hack/bench/prepcompare -plugin gpufrac=bin/gpufrac-kubelet-plugin \
//	    -plugin example=/work/ext/bin/dra-example-kubeletplugin -claims 32 -rounds 20 -runs 2
//
// The kind before "=" (or before ":LABEL=", to compare two builds of one
// kind) says how to start and address the binary: gpufrac
// (--simulate-gpus=h200x8, driver gpufrac.dev) or example
// (kubernetes-sigs/dra-example-driver's kubelet plugin, driver
// gpu.example.com, 8 devices). The example driver is never vendored here:
// build it outside the repository (docs/benchmarks.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/hack/harness"
)

type pluginFlag []string

func (p *pluginFlag) String() string     { return strings.Join(*p, ",") }
func (p *pluginFlag) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var plugins pluginFlag
	flag.Var(&plugins, "plugin", "KIND=BINARY, KIND gpufrac or example; repeat for each plugin to compare")
	claims := flag.Int("claims", 32, "claims per round: prepared, then unprepared")
	rounds := flag.Int("rounds", 20, "rounds per run")
	runs := flag.Int("runs", 2, "runs of each plugin, alternating")
	fresh := flag.Bool("fresh-claims", false, "create new claims for every round and delete them after their Unprepare, as short jobs do (default: the same claims every round)")
	concs := flag.String("concurrency", "1,8", "concurrencies of the kubelet's calls, comma-separated")
	settle := flag.Bool("settle-status", false, "between a round's Prepares and its Unprepares wait, untimed, until gpufrac's status.devices is written for every claim, as pods run a while in a cluster (the example driver writes none); reports the wait")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	var levels []int
	for _, s := range strings.Split(*concs, ",") {
		var c int
		if _, err := fmt.Sscanf(s, "%d", &c); err != nil || c < 1 {
			fmt.Fprintf(os.Stderr, "-concurrency: %q is not a positive number\n", s)
			os.Exit(2)
		}
		levels = append(levels, c)
	}
	specs, err := parsePlugins(plugins)
	if err == nil && (*claims < 1 || *rounds < 1 || *runs < 1) {
		err = fmt.Errorf("-claims, -rounds and -runs must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := run(ctx, specs, *claims, *rounds, *runs, levels, *fresh, *settle); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, specs []pluginSpec, claims, rounds, runs int, levels []int, fresh, settle bool) error {
	cp, err := harness.Start(ctx, harness.Options{Progress: os.Stderr, PluginBinary: gpufracBinary(specs)})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Close() }()
	b := &bench{cp: cp, claims: claims, rounds: rounds, fresh: fresh, settle: settle}
	if err := b.setup(ctx); err != nil {
		return err
	}
	var results []result
	for r := range runs {
		for _, spec := range specs {
			for _, conc := range levels {
				res, err := b.measure(ctx, spec, conc)
				if err != nil {
					return fmt.Errorf("%s at concurrency %d, run %d: %w", spec.label, conc, r+1, err)
				}
				res.run = r + 1
				fmt.Fprintf(os.Stderr, "%s run %d concurrency %d: prepare %.0f claims/s (p50 %.2f ms), unprepare %.0f claims/s (p50 %.2f ms)\n",
					spec.label, res.run, conc, res.prepare.perSec, ms(res.prepare.p50), res.unprepare.perSec, ms(res.unprepare.p50))
				if len(res.statusLag) > 0 {
					lag := slices.Sorted(slices.Values(res.statusLag))
					fmt.Fprintf(os.Stderr, "%s run %d concurrency %d: status of every claim written %.0f ms (median) / %.0f ms (max) after its round's last Prepare\n",
						spec.label, res.run, conc, ms(lag[len(lag)/2]), ms(lag[len(lag)-1]))
				}
				results = append(results, res)
			}
		}
	}
	if settle {
		fmt.Println("Between Prepares and Unprepares: untimed wait for gpufrac's status of every claim (-settle-status).")
	}
	if fresh {
		fmt.Println("Claims: new every round, deleted after their Unprepare (-fresh-claims).")
	} else {
		fmt.Println("Claims: the same every round.")
	}
	fmt.Print(table(results, specs, levels, claims, rounds))
	return nil
}
