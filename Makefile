# gpufrac: the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need is built or fetched from the Go module proxy by these
# targets themselves; nothing has to be installed by hand beyond Go and gcc.

GO            ?= go
BIN           := $(CURDIR)/bin
# Linters run with `go run module@version`: nothing to install, and Go's
# build cache keeps the binaries after the first (cold: a few minutes) build.
GOLANGCI_LINT := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
LOGCHECK      := sigs.k8s.io/logtools/logcheck@v0.11.0
# go-nvml's cgo wrapper uses deprecated NVML declarations on purpose (it
# binds every entry point); the warnings drown real build output.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
export CGO_ENABLED = 1
# Every go command run from here (vet, the tests, the binaries the harness
# builds, go run) compiles with -trimpath, the flag a reproducible release
# needs (hack/release): Go's build cache keys a package by its flags, so one
# set of flags lets `make test-release` and `make release` reuse what `make
# test` compiled for each platform instead of compiling every dependency
# once more (docs/design/testing.md, "CI's whole run"). Added to what go
# itself takes (the environment's or `go env -w`'s GOFLAGS, which setting
# the variable here would otherwise hide).
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell $(GO) env GOFLAGS)) -trimpath)


.PHONY: all help build build-host build-cli test test-unit test-helm test-compat compat-e2e lint docs dashboards demo clean fuzz bench bench-realsched bench-churn bench-prepcompare soak kube-binaries e2e release test-release

all: build ## Same as make build

# The targets live in hack/make/, one file per concern (build, test, lint,
# docs, bench); `make help` lists them from the "## " note on each target's
# line (test/hygiene holds every target to having one).
include hack/make/build.mk hack/make/test.mk hack/make/lint.mk hack/make/docs.mk hack/make/bench.mk

help: ## List every target with one line each
	@awk -F ':[^#]*## ' '/^[a-zA-Z0-9_-]+:[^=]*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
