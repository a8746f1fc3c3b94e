# Copyright The gpufrac Authors.
# SPDX-License-Identifier: Apache-2.0
#
# Generated documentation, the dashboard and the demo. Included by the Makefile at the root.

# Rewrites the generated parts of docs/reference.md (flags of every binary,
# the chart's values) from the code; `make test` fails while they differ.
docs: dashboards ## Rewrite the generated parts of docs/reference.md
	GPUFRAC_UPDATE_DOCS=1 $(GO) test -count=1 -p 1 -run '^(TestReference|TestChartValuesReference)$$' ./cmd/... ./test/docs

# The Grafana dashboard (docs/dashboards.md), written from code by
# deployments/grafana/gen (a module of its own: the Grafana Foundation SDK
# stays out of gpufrac's go.mod) into the file for import by hand and the
# chart's copy, which its ConfigMap carries; `make test` fails while either
# differs from the generator's output.
dashboards: ## Regenerate the Grafana dashboard from code
	cd deployments/grafana/gen && $(GO) run . ../gpufrac.json ../../helm/gpufrac/dashboards/gpufrac.json

# A local control plane with two simulated 8 x H200 nodes running the demo's
# pods; see demo/run.sh. DEMO_ARGS=-wait keeps the cluster until Ctrl-C.
demo: build ## A local control plane with two simulated 8 x H200 nodes running the demo
	@./demo/run.sh $(DEMO_ARGS)
