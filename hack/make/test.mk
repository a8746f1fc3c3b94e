# Copyright The gpufrac Authors.
# SPDX-License-Identifier: Apache-2.0
#
# The test tiers (docs/design/testing.md). Included by the Makefile at the root.

# Every `go test` here names its timeout: go's default (10 minutes a test
# binary) is shorter than a loaded machine needs for the real-node tier, and
# a silent default would move with Go. One binary running past this is a hang.
TEST_TIMEOUT ?= 30m

# The whole suite, with the race detector. -count=1 because several tests
# exercise real sockets and processes whose results must not be cached.
# kube-binaries first: on a fresh machine the integration tests' upstream
# binaries are built there, with progress on the terminal, rather than
# silently inside go test's buffered output (the tests build them too when
# run alone). It also builds the real node of test/e2e where that can run
# (root, Linux, writable cgroups), and otherwise says why test/e2e skips.
test: kube-binaries ## The whole suite, race detector on: unit, integration, e2e (root), Helm, compatibility tier
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd hack/bench/packing && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd deployments/grafana/gen && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) test-helm
	$(MAKE) test-compat

# The compatibility tier (docs/design/testing.md): the integration tests
# that exercise the API surface (slices and consumable capacity, the
# scheduler's allocation, device taints, the packing policy and webhooks,
# KAI translation, claim status, the start-time feature check) once more
# against the oldest Kubernetes gpufrac supports, COMPAT_KUBE_VERSION,
# whose control plane builds once per machine into
# ${XDG_CACHE_HOME:-~/.cache}/gpufrac/kube-$(COMPAT_KUBE_VERSION) from the
# recipe hack/kube136 (kube-binaries shows that build's progress first).
# -race as above, so the test binary is the one `make test` just built.
# The packing policy's tests run on v1.36.3 with the parameter informer
# kept alive (harness.KeepParameterInformer; install.md says why).
COMPAT_KUBE_VERSION ?= v1.36.3
COMPAT_TESTS ?= ^(TestResourceSlicesAcceptedByAPIServer|TestDeviceClassCELSelectors|TestSevenPodsOfFortyGiOnTwoH200|TestSevenPodsRunAndAReplacementStarts|TestPreparedClaimReachesTheContainer|TestUnhealthyGPUIsTaintedAndAvoided|TestOneGuaranteePolicy|TestPackingInTheRealScheduler|TestKAIAnnotatedPodRunsWithItsShare|TestKAIDryRunCreatesNothing|TestWhyNamesWhatTheSchedulerDoesNot|TestRefusesToStartWithoutConsumableCapacity|TestPackingPolicyPatchesAsTheWebhook|TestPackingPolicyAfterTheLastParamPolicyWentAway)$$
test-compat: ## The API-surface integration tests against the oldest supported Kubernetes
	@GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) run ./hack/cmd/kube-binaries -q
	GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(COMPAT_TESTS)' ./test/integration/

# The compatibility tier on a real node (root only, like `make e2e`): the
# control plane and the kubelet of COMPAT_KUBE_VERSION (the node's other
# pieces as in `make e2e`, linked once more into
# ~/.cache/gpufrac/node-$(COMPAT_KUBE_VERSION) from Go's build cache), a pod
# with a claim prepared by the plugin through that kubelet. .ci/run runs it
# as root after `make test`. -race, as in `make test`: the compatibility
# tier builds only what it runs, so it reuses the test binary `make test`
# built instead of compiling test/e2e and all it links a second time
# without the race detector. test/hygiene checks that every name in both
# lists is a test of its package.
COMPAT_E2E_TESTS ?= ^TestTimeSlicingPodSeesItsGPU$$
compat-e2e: ## The real-node test against the oldest supported kubelet (root)
	@GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) run ./hack/cmd/kube-binaries -q -node
	GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -v -run '$(COMPAT_E2E_TESTS)' ./test/e2e/

# The tests that need no control plane and no upstream binaries: every
# package whose test binary does not link hack/harness, hack/kubebuild or
# hack/nodebuild (asked of go list, so a new package sorts itself), with
# -short. UNIT_FLAGS="-short -race" for the race detector (slower to build).
UNIT_FLAGS ?= -short
test-unit: ## The tests that need no control plane and no upstream binaries (-short)
	@pkgs=$$($(GO) list -test -f '{{.ImportPath}} {{join .Deps " "}} ' ./... | \
		grep -E '^[^ ]+\.test ' | \
		grep -v -E ' github.com/gpufrac/gpufrac/hack/(harness|kubebuild|nodebuild) ' | \
		cut -d' ' -f1 | sed 's/\.test$$//'); \
	echo "$(GO) test -count=1 $(UNIT_FLAGS) <$$(echo $$pkgs | wc -w) packages>"; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FLAGS) $$pkgs
	cd hack/bench/packing && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FLAGS) ./...
	cd deployments/grafana/gen && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FLAGS) ./...

# The Helm chart's tests live in their own module (test/helm, so the Helm SDK
# stays out of gpufrac's go.mod), which `go test ./...` from the root does
# not enter. No race detector: the code under test is the chart; the harness
# and plugin it runs are raced in the suite above. As root it includes
# TestHelmReleaseOnTheRealNode (install, workload, upgrade, rollback and
# uninstall on a real node: about 3 minutes); TestReleaseArtifacts is
# `make test-release`'s.
test-helm: ## The Helm chart's tests (test/helm; the real-node release as root)
	cd test/helm && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -skip '^TestReleaseArtifacts$$' ./...

# `make release`'s test: the release tool run twice for 0.0.0-test, every
# artefact checked, the chart installed from its package. Not part of `make
# test`, for a developer's sake: on its own, on a cold build cache, its
# first run compiles every dependency for six targets (20 minutes on 2
# cores); after `make test` (as in .ci/run) it finds five of them compiled,
# GOFLAGS above, and takes about 8 minutes (docs/design/testing.md).
test-release: ## make release's test: two releases compared byte for byte, the chart installed
	cd test/helm && $(GO) test -count=1 -timeout 45m -run '^TestReleaseArtifacts$$' -v .

# The end-to-end tests alone: the control plane plus a real node (kubelet,
# containerd, runc) running pods with the plugin's CDI specs, and the Helm
# chart's release on a real node (test/helm). Root only.
e2e: ## The end-to-end tests alone on a real node (root)
	@$(GO) run ./hack/cmd/kube-binaries -q -node
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/
	cd test/helm && $(GO) test -count=1 -timeout 30m -v -run TestHelmReleaseOnTheRealNode .

# Each fuzz target for FUZZTIME (go test -fuzz takes one target at a time);
# `make test` runs their seed corpora already.
FUZZTIME ?= 1m
FUZZ_TARGETS := \
	FuzzDecodeValidate:./api/gpufrac.dev/v1alpha1 \
	FuzzTranslate:./internal/translate/kai \
	FuzzCheck:./internal/manifestcheck \
	FuzzDecode:./internal/node/checkpoint \
	FuzzReadState:./internal/hook/cdihook \
	FuzzParseLimit:./internal/hook/hookarg \
	FuzzRecordPath:./internal/hook/cdihook \
	FuzzFindCgroup:./internal/hook/cdihook \
	FuzzComputeConsumed:./internal/core/plan
fuzz: ## Each fuzz target for FUZZTIME (default 1m)
	@for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) -timeout $(TEST_TIMEOUT) $${t#*:} || exit 1; \
	done
