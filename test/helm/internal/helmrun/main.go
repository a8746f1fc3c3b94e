// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command helmrun runs one Helm SDK action (what `helm install/upgrade/
// rollback/uninstall --wait` and `helm status` run) and prints the release
// as JSON. hack/harness (Helm) runs it as a separate process: the
// SDK's cli-runtime imports kustomize, which imports Go's plugin package,
// and a binary with plugin is bound at start (-z now), which a test binary
// that also links go-nvml (through the harness; NVML's symbols stay
// unresolved until the library is loaded) cannot survive.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Release is what helmrun prints.
type Release struct {
	Name        string `json:"name"`
	Revision    int    `json:"revision"`
	Status      string `json:"status"`
	Description string `json:"description"`
	AppVersion  string `json:"appVersion"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helmrun:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	namespace := flag.String("namespace", "", "the release's namespace")
	name := flag.String("release", "", "the release's name")
	act := flag.String("action", "", "install, upgrade, rollback, uninstall or status")
	chartDir := flag.String("chart", "", "chart directory or package (install, upgrade)")
	wait := flag.Bool("wait", true, "wait for the release's resources to be ready")
	valuesFile := flag.String("values", "", "JSON file of values (install, upgrade)")
	revision := flag.Int("revision", 0, "revision to roll back to")
	timeout := flag.Duration("timeout", 4*time.Minute, "how long to wait for the release's resources")
	flag.Parse()

	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = kubeconfig, namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, *namespace, "secret", func(string, ...any) {}); err != nil {
		return fmt.Errorf("initialising Helm: %w", err)
	}
	values := map[string]any{}
	if *valuesFile != "" {
		raw, err := os.ReadFile(*valuesFile)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &values); err != nil {
			return fmt.Errorf("%s: %w", *valuesFile, err)
		}
	}
	ctx := context.Background()
	var rel *release.Release
	var err error
	switch *act {
	case "install", "upgrade":
		ch, lerr := loader.Load(*chartDir)
		if lerr != nil {
			return lerr
		}
		if *act == "install" {
			in := action.NewInstall(cfg)
			in.ReleaseName, in.Namespace, in.CreateNamespace = *name, *namespace, true
			in.Wait, in.Timeout = *wait, *timeout
			rel, err = in.RunWithContext(ctx, ch, values)
		} else {
			up := action.NewUpgrade(cfg)
			up.Namespace = *namespace
			up.Wait, up.Timeout = *wait, *timeout
			rel, err = up.RunWithContext(ctx, *name, ch, values)
		}
	case "rollback":
		rb := action.NewRollback(cfg)
		rb.Version = *revision
		rb.Wait, rb.Timeout = true, *timeout
		if err = rb.Run(*name); err == nil {
			rel, err = action.NewStatus(cfg).Run(*name)
		}
	case "uninstall":
		un := action.NewUninstall(cfg)
		un.Wait, un.Timeout = true, *timeout
		var resp *release.UninstallReleaseResponse
		if resp, err = un.Run(*name); err == nil {
			rel = resp.Release
		}
	case "status":
		rel, err = action.NewStatus(cfg).Run(*name)
	default:
		return fmt.Errorf("-action %q: want install, upgrade, rollback, uninstall or status", *act)
	}
	if err != nil {
		return fmt.Errorf("helm %s %s: %w", *act, *name, err)
	}
	out := Release{Name: rel.Name, Revision: rel.Version}
	if rel.Info != nil {
		out.Status, out.Description = rel.Info.Status.String(), rel.Info.Description
	}
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		out.AppVersion = rel.Chart.Metadata.AppVersion
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
