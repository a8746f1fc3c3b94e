// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/test/docs"
)

const module = "github.com/gpufrac/gpufrac/"

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// layoutHeading is where the architecture lists the packages.
const layoutHeading = "## Layout"

// TestArchitectureListsEveryPackage: every package of the root module under
// api/, cmd/, internal/ and pkg/ has a line in the architecture's layout.
func TestArchitectureListsEveryPackage(t *testing.T) {
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, module)
		for _, area := range []string{"api/", "cmd/", "internal/", "pkg/"} {
			if strings.HasPrefix(rel, area) {
				pkgs = append(pkgs, rel)
			}
		}
	}
	if len(pkgs) < 40 {
		t.Fatalf("go list found only %d packages under api/, cmd/, internal/, pkg/", len(pkgs))
	}
	block := docs.CodeBlockUnder(read(t, "docs/design/architecture.md"), layoutHeading)
	for _, p := range missingPackages(block, pkgs) {
		t.Errorf("docs/design/architecture.md, %q: package %s is not listed; add a line with its one concern", layoutHeading, p)
	}
}

func missingPackages(block string, pkgs []string) []string {
	listed := docs.LayoutPackages(block)
	var out []string
	for _, p := range pkgs {
		if !listed[p] {
			out = append(out, p)
		}
	}
	return out
}

func TestMissingPackagesFindsAPlantedOne(t *testing.T) {
	block := "internal/node/       the node\n  plugin            the plugin\n                    continued\ncmd/\n  gpufrac-controller  a main\n"
	for _, tc := range []struct {
		pkgs []string
		want string
	}{
		{[]string{"internal/node/plugin", "cmd/gpufrac-controller"}, ""},
		{[]string{"internal/node/plugin", "internal/node/preparer"}, "internal/node/preparer"},
		{[]string{"internal/node/continued"}, "internal/node/continued"}, // a description line is not a package
		{[]string{"cmd/gpufrac-controller", "internal/node"}, ""},
	} {
		if got := strings.Join(missingPackages(block, tc.pkgs), " "); got != tc.want {
			t.Errorf("missingPackages(%v) = %q, want %q", tc.pkgs, got, tc.want)
		}
	}
}

// knownFlags are the flags of every gpufrac binary: the cobra ones from the
// reference's generated sections (kept equal to the commands by
// cmd/*/reference_test.go), gpufrac-mps-launcher's from its flag set, and
// the plugin's test-build flag from its build-tagged file.
func knownFlags(t *testing.T) map[string]map[string]bool {
	known := docs.ReferenceFlags(read(t, "docs/reference.md"))
	for _, bin := range []string{"gpufrac-kubelet-plugin", "gpufrac-controller", "gpufrac-cdi-hook", "kubectl-gpufrac"} {
		if len(known[bin]) < 2 {
			t.Fatalf("docs/reference.md: no flags found for %s", bin)
		}
	}
	known["gpufrac-mps-launcher"] = map[string]bool{"help": true}
	for _, src := range []struct{ bin, file string }{
		{"gpufrac-mps-launcher", "cmd/gpufrac-mps-launcher/main.go"},
		{"gpufrac-kubelet-plugin", "cmd/gpufrac-kubelet-plugin/failpoints.go"},
	} {
		flags := docs.GoFlags(read(t, src.file))
		if len(flags) == 0 {
			t.Fatalf("%s: no flag definitions found", src.file)
		}
		for _, f := range flags {
			known[src.bin][f] = true
		}
	}
	return known
}

// TestDocsNameOnlyRealFlags: every flag a page attributes to a gpufrac
// binary (the rule is docs.UndefinedFlags') is one the binary defines.
func TestDocsNameOnlyRealFlags(t *testing.T) {
	// With nothing known every attributed flag is reported: a rule that
	// stopped attributing would pass every page.
	checkEveryDoc(t, docs.UndefinedFlags, knownFlags(t), nil, 30, "flag uses attributed to gpufrac binaries")
}

// checkEveryDoc reports, per page, what check finds against known, and
// fails when check finds fewer than least uses against none (what knows
// nothing, so every use is reported): a rule that stopped matching would
// otherwise pass every page.
func checkEveryDoc[K any](t *testing.T, check func(page string, known K) []docs.Finding, known, none K, least int, what string) {
	t.Helper()
	uses := 0
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		uses += len(check(string(text), none))
		for _, f := range check(string(text), known) {
			t.Errorf("%s:%s", rel(file), f)
		}
	}
	if uses < least {
		t.Errorf("only %d %s found in the docs: the rule no longer matches them", uses, what)
	}
}

func TestUndefinedFlagsFindsPlantedOnes(t *testing.T) {
	known := map[string]map[string]bool{
		"gpufrac-kubelet-plugin": {"node-name": true, "simulate-gpus": true},
		"gpufrac-controller":     {"packing-labels": true},
		"kubectl-gpufrac":        {"packing": true, "kubeconfig": true},
	}
	for _, tc := range []struct{ page, want string }{
		{"```sh\ngpufrac-kubelet-plugin --node-name=n1 --simulate-gpus=h200x8\n```\n", ""},
		{"```sh\ngpufrac-kubelet-plugin --node-name=n1 --simulate-gpu=h200x8\n```\n", "--simulate-gpu"},
		{"Run `gpufrac-controller --packing-label` to keep them.\n", "--packing-label"},
		{"gpufrac-controller keeps them (`--packing-label`).\n", "--packing-label"},
		{"## kubectl gpufrac simulate\n\nWith `--packings` off.\n", "--packings"},
		{"## kubectl gpufrac simulate\n\nWith `--packing` off.\n", ""},
		{"The kubelet's `--root-dir` and helm's `--set` are not ours.\n", ""},
		{"```sh\nhelm install x --set a=b --wait\nkubelet --root-dir /var\n```\n", ""},
		{"```sh\nkubectl gpufrac why llm --kubeconfig k --verbose\n```\n", "--verbose"},
		{"<!-- BEGIN GENERATED x -->\n`gpufrac-controller --nope`\n<!-- END GENERATED x -->\n", ""},
		{"gpufrac-controller takes no `--` alone, nor `---`.\n", ""},
	} {
		var got []string
		for _, f := range docs.UndefinedFlags(tc.page, known) {
			got = append(got, "--"+f.Name)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("UndefinedFlags(%q) = %v, want %q", tc.page, got, tc.want)
		}
	}
}

// knownMetrics are the gpufrac_ metrics registered by the code outside
// tests.
func knownMetrics(t *testing.T) map[string]bool {
	known := map[string]bool{}
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.Walk(filepath.Join(root, dir), func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range docs.GoMetrics(string(b)) {
				known[m] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(known) < 10 {
		t.Fatalf("only %d gpufrac_ metrics found in the code: the pattern no longer matches", len(known))
	}
	return known
}

// TestDocsNameOnlyRealMetrics: every gpufrac_ metric a page names is
// registered by the code.
func TestDocsNameOnlyRealMetrics(t *testing.T) {
	checkEveryDoc(t, docs.UnknownMetrics, knownMetrics(t), nil, 10, "metric names")
}

func TestUnknownMetricsFindsPlantedOnes(t *testing.T) {
	src := "prometheus.CounterOpts{Name: \"gpufrac_incidents_total\"}\nprometheus.NewDesc(\"gpufrac_mps_daemons\", \"h\", nil, nil)\nprometheus.HistogramOpts{\n\tName: \"gpufrac_prepare_duration_seconds\"}\n"
	known := map[string]bool{}
	for _, m := range docs.GoMetrics(src) {
		known[m] = true
	}
	for _, tc := range []struct{ page, want string }{
		{"`gpufrac_incidents_total` and gpufrac_mps_daemons\n", ""},
		{"rate(gpufrac_prepare_duration_seconds_bucket[5m])\n", ""},
		{"`gpufrac_incident_total`\n", "gpufrac_incident_total"},
		{"```\ngpufrac_mps_daemon{node=\"a\"} 1\n```\n", "gpufrac_mps_daemon"},
		{"/tmp/gpufrac-mps/{pipe,gpufrac_mps_config}\n", ""},
	} {
		var got []string
		for _, f := range docs.UnknownMetrics(tc.page, known) {
			got = append(got, f.Name)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("UnknownMetrics(%q) = %v, want %q", tc.page, got, tc.want)
		}
	}
}

func chartValues(t *testing.T) *docs.ChartValues {
	c, err := docs.NewChartValues([]byte(read(t, "deployments/helm/gpufrac/values.yaml")), []byte(read(t, "deployments/helm/gpufrac/values.schema.json")))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDocsNameOnlyRealChartValues: every chart value path a page names
// (the rule is docs.UnknownValues') is in the chart's values.yaml.
func TestDocsNameOnlyRealChartValues(t *testing.T) {
	c := chartValues(t)
	if !c.Has("kubeletPlugin.nvidiaDriverRoot") || !c.Has("mps.enabled") || c.Has("mps.nope") {
		t.Fatal("chart value lookup is broken")
	}
	// With the real top-level keys but nothing below them, every path the
	// rule finds is reported, which counts them.
	checkEveryDoc(t, docs.UnknownValues, c, c.TopLevelOnly(), 10, "chart value paths")
}

func TestUnknownValuesFindsPlantedOnes(t *testing.T) {
	c, err := docs.NewChartValues(
		[]byte("mps:\n  enabled: true\ncontroller:\n  packing:\n    enabled: true\nkubeletPlugin:\n  nodeSelector: {}\n"),
		[]byte(`{"properties":{"mps":{"properties":{"enabled":{}}},"controller":{"properties":{"packing":{"properties":{"enabled":{}}}}},"kubeletPlugin":{"properties":{"nodeSelector":{"type":"object"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ page, want string }{
		{"Set `mps.enabled` and `controller.packing.enabled`.\n", ""},
		{"Set `mps.enable`.\n", "mps.enable"},
		{"the chart value `plugin.mps.foo`\n", "plugin.mps.foo"},
		{"```sh\nhelm install g chart --set controller.packing.enable=false\n```\n", "controller.packing.enable"},
		{"`kubeletPlugin.nodeSelector.gpu` is the user's\n", ""},
		{"`status.devices` and `gpufrac.dev` are not values\n", ""},
		{"`controller.Run` is Go, not a value\n", ""},
	} {
		var got []string
		for _, f := range docs.UnknownValues(tc.page, c) {
			got = append(got, f.Name)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("UnknownValues(%q) = %v, want %q", tc.page, got, tc.want)
		}
	}
}

var datedHeading = regexp.MustCompile(`(?m)^#{1,6} .*\b20\d\d-\d\d-\d\d\b`)

// datedHeadings returns the headings of a page that carry a date: the mark
// of a measurement log, which belongs in docs/design/log.
func datedHeadings(page string) []string {
	var out []string
	for n, l := range docs.ProseLines(page) {
		if datedHeading.MatchString(l) {
			out = append(out, fmt.Sprintf("%d: %s", n+1, l))
		}
	}
	return out
}

// TestTopLevelDocsHoldNoDatedLog: the pages for users and operators
// (docs/*.md) give current facts; dated entries go to docs/design/log.
func TestTopLevelDocsHoldNoDatedLog(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) < 10 {
		t.Fatalf("docs/*.md: %d files, %v", len(files), err)
	}
	for _, file := range files {
		for _, h := range datedHeadings(read(t, rel(file))) {
			t.Errorf("%s:%s: a dated entry; move it to docs/design/log and keep the current figure here", rel(file), h)
		}
	}
}

func TestDatedHeadingsFindsAPlantedOne(t *testing.T) {
	if got := datedHeadings("# Benchmarks\n\nFigures from 2026-11-30.\n\n```\n# 2026-12-01 run\n```\n"); len(got) != 0 {
		t.Errorf("prose dates and code blocks counted: %v", got)
	}
	if got := datedHeadings("# Benchmarks\n\n### With each claim reserved (2026-12-01, later)\n"); len(got) != 1 {
		t.Errorf("a dated heading not found: %v", got)
	}
}
