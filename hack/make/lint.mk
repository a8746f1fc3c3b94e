# Copyright The gpufrac Authors.
# SPDX-License-Identifier: Apache-2.0
#
# Lint. Included by the Makefile at the root.

# Every Go module of the repository: the root and the three that keep heavy
# dependencies out of gpufrac's go.mod (the Helm SDK, gonum/plot, the
# Grafana Foundation SDK).
LINT_MODULES := . test/helm hack/bench/packing deployments/grafana/gen
# The modules whose code logs (the other two only print).
LOGCHECK_MODULES := . test/helm hack/bench/packing

# Each linter type-checks each module once. golangci-lint runs go vet's
# analyzers (govet) and staticcheck among its linters (.golangci.yml), so
# neither runs on its own as well (a cold CI spent minutes building and
# running both twice). logcheck runs as go vet's vettool: it reads the
# export data of compiled packages (which the tests' builds reuse) instead
# of type-checking every dependency from source. As a vettool it reports in
# JSON and exits 0, so its findings are read off its output.
lint: ## gofmt, golangci-lint (govet and staticcheck among its linters) and logcheck, every module
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(LINT_MODULES); do \
		echo "golangci-lint run ($$m)"; \
		(cd $$m && $(GO) run $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; \
	done
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install $(LOGCHECK)
	@for m in $(LOGCHECK_MODULES); do \
		echo "logcheck -check-contextual ($$m)"; \
		out=$$(cd $$m && $(GO) vet -vettool=$(BIN)/logcheck -check-contextual -config=$(CURDIR)/logcheck.conf ./... 2>&1) || { echo "$$out"; exit 1; }; \
		if echo "$$out" | grep -q '"message"'; then echo "$$out"; exit 1; fi; \
	done
