# Copyright The gpufrac Authors.
# SPDX-License-Identifier: Apache-2.0
#
# Building gpufrac's binaries, the Kubernetes ones the tests run, and a release. Included by the Makefile at the root.

build: ## Build every binary into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	$(MAKE) --no-print-directory build-host

# The binaries that run in the host's namespace, with the host's glibc
# (gpufrac-cdi-hook: the runtime runs it from the host, where the chart's
# init container installed it), built without cgo so they run on glibc
# 2.17 and later: NVML is loaded with dlopen (internal/hook/purenvml).
# TestHookRunsOnOldGlibc (hack/hostbin) builds them with this target and
# reads what they need of the C library.
HOST_BINARIES := gpufrac-cdi-hook
build-host: ## Build the host binaries (gpufrac-cdi-hook) without cgo into bin/
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(HOST_BINARIES))

# kubectl-gpufrac without cgo for every platform krew ships it to, into
# bin/kubectl-gpufrac-GOOS-GOARCH: it links neither NVML nor a C library
# (test/deps pins that), so it cross-compiles from any machine.
CLI_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
build-cli: ## Cross-build kubectl-gpufrac for every krew platform into bin/
	@mkdir -p $(BIN)
	@for p in $(CLI_PLATFORMS); do \
		echo "CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -o $(BIN)/kubectl-gpufrac-$${p%/*}-$${p#*/} ./cmd/kubectl-gpufrac"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -o $(BIN)/kubectl-gpufrac-$${p%/*}-$${p#*/} ./cmd/kubectl-gpufrac || exit 1; \
	done


# etcd, kube-apiserver, kube-scheduler and kube-controller-manager v1.37.2
# for the integration harness, built from the Go module proxy once per
# machine (15 to 20 minutes on 2 cores, kube-apiserver most of it) into
# ${XDG_CACHE_HOME:-~/.cache}/gpufrac/kube-v1.37.2; instant afterwards.
# GPUFRAC_KUBE_VERSION=v1.36.3 builds the compatibility tier's instead
# (test-compat does).
kube-binaries: ## Build the Kubernetes control plane and real node the tests run (once per machine)
	@$(GO) run ./hack/cmd/kube-binaries -q -node


# Every artefact a release publishes, into bin/release/$(VERSION)/, without
# Docker and reproducibly (docs/releasing.md; hack/release has the logic):
# the chart package, the image as an OCI archive for linux/amd64 and
# linux/arm64 with an SBOM each, kubectl-gpufrac's archives, the filled krew
# manifest and SHA256SUMS. The arm64 image's cross compiler comes from
# Debian with `apt-get download` (nothing installed); RELEASE_ARGS=
# "-image-arches amd64" leaves it out. SOURCE_DATE_EPOCH defaults to HEAD's
# commit time.
VERSION ?=
RELEASE_ARGS ?=
release: ## Build every release artefact into bin/release/VERSION/ (VERSION=x.y.z)
	@test -n "$(VERSION)" || { echo "make release VERSION=x.y.z: VERSION is required"; exit 1; }
	$(GO) run ./hack/cmd/release -version $(VERSION) $(RELEASE_ARGS)

clean: ## Remove bin/
	rm -rf $(BIN)
