# gpufrac: the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need is built or fetched from the Go module proxy by these
# targets themselves; nothing has to be installed by hand beyond Go and gcc.

GO            ?= go
BIN           := $(CURDIR)/bin
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
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
# needs (test/release): Go's build cache keys a package by its flags, so one
# set of flags lets `make test-release` and `make release` reuse what `make
# test` compiled for each platform instead of compiling every dependency
# once more (docs/design/testing.md, "CI's whole run"). Added to what go
# itself takes (the environment's or `go env -w`'s GOFLAGS, which setting
# the variable here would otherwise hide).
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell $(GO) env GOFLAGS)) -trimpath)

.PHONY: all build build-host build-cli test test-unit test-helm test-compat compat-e2e lint docs dashboards demo clean fuzz bench bench-realsched bench-churn bench-prepcompare soak kube-binaries e2e release test-release

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...
	$(MAKE) --no-print-directory build-host

# The binaries that run in the host's namespace, with the host's glibc
# (gpufrac-cdi-hook: the runtime runs it from the host, where the chart's
# init container installed it), built without cgo so they run on glibc
# 2.17 and later: NVML is loaded with dlopen (internal/node/purenvml).
# TestHookRunsOnOldGlibc (test/hostbin) builds them with this target and
# reads what they need of the C library.
HOST_BINARIES := gpufrac-cdi-hook
build-host:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(HOST_BINARIES))

# kubectl-gpufrac without cgo for every platform krew ships it to, into
# bin/kubectl-gpufrac-GOOS-GOARCH: it links neither NVML nor a C library
# (test/deps pins that), so it cross-compiles from any machine.
CLI_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
build-cli:
	@mkdir -p $(BIN)
	@for p in $(CLI_PLATFORMS); do \
		echo "CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -o $(BIN)/kubectl-gpufrac-$${p%/*}-$${p#*/} ./cmd/kubectl-gpufrac"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -o $(BIN)/kubectl-gpufrac-$${p%/*}-$${p#*/} ./cmd/kubectl-gpufrac || exit 1; \
	done

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
test: kube-binaries
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd test/bench/packing && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
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
# recipe test/kube136 (kube-binaries shows that build's progress first).
# -race as above, so the test binary is the one `make test` just built.
# The packing policy's tests run on v1.36.3 with the parameter informer
# kept alive (harness.KeepParameterInformer; install.md says why).
COMPAT_KUBE_VERSION ?= v1.36.3
COMPAT_TESTS ?= ^(TestResourceSlicesAcceptedByAPIServer|TestDeviceClassCELSelectors|TestSevenPodsOfFortyGiOnTwoH200|TestSevenPodsRunAndAReplacementStarts|TestPreparedClaimReachesTheContainer|TestUnhealthyGPUIsTaintedAndAvoided|TestOneGuaranteePolicy|TestPackingInTheRealScheduler|TestKAIAnnotatedPodRunsWithItsShare|TestKAIDryRunCreatesNothing|TestWhyNamesWhatTheSchedulerDoesNot|TestRefusesToStartWithoutConsumableCapacity|TestPackingPolicyPatchesAsTheWebhook|TestPackingPolicyAfterTheLastParamPolicyWentAway)$$
test-compat:
	@GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) run ./test/cmd/kube-binaries -q
	GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(COMPAT_TESTS)' ./test/integration/

# The compatibility tier on a real node (root only, like `make e2e`): the
# control plane and the kubelet of COMPAT_KUBE_VERSION (the node's other
# pieces as in `make e2e`, linked once more into
# ~/.cache/gpufrac/node-$(COMPAT_KUBE_VERSION) from Go's build cache), a pod
# with a claim prepared by the plugin through that kubelet. .ci/run runs it
# as root after `make test`.
COMPAT_E2E_TESTS ?= ^TestTimeSlicingPodSeesItsGPU$$
compat-e2e:
	@GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) run ./test/cmd/kube-binaries -q -node
	GPUFRAC_KUBE_VERSION=$(COMPAT_KUBE_VERSION) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v -run '$(COMPAT_E2E_TESTS)' ./test/e2e/

# The tests that need no control plane and no upstream binaries: every
# package whose test binary does not link test/harness, test/kubebuild or
# test/nodebuild (asked of go list, so a new package sorts itself), with
# -short. UNIT_FLAGS="-short -race" for the race detector (slower to build).
UNIT_FLAGS ?= -short
test-unit:
	@pkgs=$$($(GO) list -test -f '{{.ImportPath}} {{join .Deps " "}} ' ./... | \
		grep -E '^[^ ]+\.test ' | \
		grep -v -E ' github.com/gpufrac/gpufrac/test/(harness|kubebuild|nodebuild) ' | \
		cut -d' ' -f1 | sed 's/\.test$$//'); \
	echo "$(GO) test -count=1 $(UNIT_FLAGS) <$$(echo $$pkgs | wc -w) packages>"; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FLAGS) $$pkgs
	cd test/bench/packing && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FLAGS) ./...
	cd deployments/grafana/gen && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(UNIT_FLAGS) ./...

# The Helm chart's tests live in their own module (test/helm, so the Helm SDK
# stays out of gpufrac's go.mod), which `go test ./...` from the root does
# not enter. No race detector: the code under test is the chart; the harness
# and plugin it runs are raced in the suite above. As root it includes
# TestHelmReleaseOnTheRealNode (install, workload, upgrade, rollback and
# uninstall on a real node: about 3 minutes); TestReleaseArtifacts is
# `make test-release`'s.
test-helm:
	cd test/helm && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -skip '^TestReleaseArtifacts$$' ./...

# `make release`'s test: the release tool run twice for 0.0.0-test, every
# artefact checked, the chart installed from its package. Not part of `make
# test`, for a developer's sake: on its own, on a cold build cache, its
# first run compiles every dependency for six targets (20 minutes on 2
# cores); after `make test` (as in .ci/run) it finds five of them compiled,
# GOFLAGS above, and takes about 8 minutes (docs/design/testing.md).
test-release:
	cd test/helm && $(GO) test -count=1 -timeout 45m -run '^TestReleaseArtifacts$$' -v .

# The end-to-end tests alone: the control plane plus a real node (kubelet,
# containerd, runc) running pods with the plugin's CDI specs, and the Helm
# chart's release on a real node (test/helm). Root only.
e2e:
	@$(GO) run ./test/cmd/kube-binaries -q -node
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
	FuzzReadState:./internal/node/cdihook \
	FuzzParseLimit:./internal/node/hookarg \
	FuzzRecordPath:./internal/node/cdihook \
	FuzzFindCgroup:./internal/node/cdihook \
	FuzzComputeConsumed:./internal/core/plan
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) -timeout $(TEST_TIMEOUT) $${t#*:} || exit 1; \
	done

# The packing comparison (and its chart, docs/packing.png), the Prepare
# cost against its durable-write floor and over gRPC, the webhook's
# translation latency, and the 1,000-node scale figures, in one run
# (docs/benchmarks.md has figures and method; about 5 minutes here, after
# bench-realsched, whose 64-node runs the chart shows, about 15).
bench:
	$(MAKE) bench-realsched
	cd test/bench/packing && $(GO) run . -chart $(CURDIR)/docs/packing.png -realsched $(BIN)/realsched.jsonl
	$(MAKE) bench-churn
	cd test/bench/packing && $(GO) run . -churn $(BIN)/realsched-churn.jsonl -churn-chart $(CURDIR)/docs/packing-churn.png
	$(GO) test -run '^$$' -bench 'DurableWriteFloor|Encode500|PrepareUnprepare' -benchtime 1000x -cpu 1,4 ./internal/node/checkpoint ./internal/node/preparer
	$(GO) test -run '^$$' -bench PrepareOverGRPC -benchtime 500x ./internal/node/plugin
	$(GO) test -run '^$$' -bench WebhookTranslation -benchtime 2000x ./internal/controller
	$(GO) test -run '^$$' -bench ControllerCacheAtScale -benchtime 1x ./internal/controller
	$(GO) test -run '^$$' -bench AllocateAtScale -benchtime 100x -timeout 20m ./internal/core/allocator
	$(GO) test -run '^$$' -bench WhyAtScale -benchtime 3x ./internal/cli/why

# gpufrac's kubelet plugin beside kubernetes-sigs/dra-example-driver's
# against one real control plane, the kubelet's DRA calls made directly
# (docs/benchmarks.md), new claims each round and gpufrac's status settled,
# untimed, before the Unprepares (as pods run a while in a cluster). Build
# the example plugin outside this repository and
# pass it: make bench-prepcompare EXAMPLE_PLUGIN=/path/to/dra-example-kubeletplugin
EXAMPLE_PLUGIN ?=
bench-prepcompare: build
	@test -n "$(EXAMPLE_PLUGIN)" || { echo "EXAMPLE_PLUGIN=<dra-example-kubeletplugin binary> is required"; exit 1; }
	@$(GO) run ./test/cmd/kube-binaries -q
	$(GO) run ./test/bench/prepcompare -plugin gpufrac=$(BIN)/gpufrac-kubelet-plugin -plugin example=$(EXAMPLE_PLUGIN) -claims 32 -rounds 20 -runs 2 -fresh-claims -settle-status

# Packing in the real kube-scheduler (docs/packing-scheduler.md): the
# harness control plane, nodes carrying the plugin's slices and no kubelet,
# the packing benchmark's trace, the chart's packing webhook off and on in
# turn on one cluster (-packing compare: REALSCHED_ROUNDS rounds, the
# order alternating, throughput on over off per round; REALSCHED_MODES="off
# on extender" runs each mode on a cluster of its own instead).
# 400 pods at 8, 64 and 1,000 nodes, 2,000 at 1,000 nodes; JSON lines, a
# phase each and a comparison's summary, also in bin/realsched.jsonl, which
# `make bench` charts (progress and logs in bin/realsched.log). About 20
# minutes on 2 cores, most of it the 1,000-node runs. Never part of
# `make test`.
REALSCHED_RUNS ?= 400:8 400:64 400:1000 2000:1000
REALSCHED_MODES ?= compare
REALSCHED_ROUNDS ?= 3
bench-realsched:
	@$(GO) run ./test/cmd/kube-binaries -q
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/realsched ./test/bench/realsched
	@: > $(BIN)/realsched.jsonl
	@for run in $(REALSCHED_RUNS); do \
		for p in $(REALSCHED_MODES); do \
			$(BIN)/realsched -trace $${run%%:*} -nodes $${run#*:} -packing $$p -rounds $(REALSCHED_ROUNDS) -o json 2>$(BIN)/realsched.log >$(BIN)/realsched.out || \
				{ tail -30 $(BIN)/realsched.log; exit 1; }; \
			cat $(BIN)/realsched.out; cat $(BIN)/realsched.out >>$(BIN)/realsched.jsonl; \
		done; \
	done

# Packing under churn in the real kube-scheduler (docs/packing.md): the
# trace placed as a steady population, then CHURN_EVENTS events at
# CHURN_RATE a second (a seeded Poisson process), each deleting a random
# running pod and creating one drawn from the trace; off and on alternating
# on one cluster, CHURN_ROUNDS rounds. JSON lines with the samples in
# bin/realsched-churn.jsonl, which `make bench` charts into
# docs/packing-churn.png. `make test` runs a smoke version (TestChurnSmoke:
# 8 nodes, 50 events).
CHURN_RUNS ?= 400:64
CHURN_EVENTS ?= 800
CHURN_RATE ?= 10
CHURN_ROUNDS ?= 1
bench-churn:
	@$(GO) run ./test/cmd/kube-binaries -q
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/realsched ./test/bench/realsched
	@: > $(BIN)/realsched-churn.jsonl
	@for run in $(CHURN_RUNS); do \
		$(BIN)/realsched -trace $${run%%:*} -nodes $${run#*:} -packing compare -rounds $(CHURN_ROUNDS) -churn $(CHURN_EVENTS) -rate $(CHURN_RATE) -o json 2>$(BIN)/realsched-churn.log >$(BIN)/realsched-churn.out || \
			{ tail -30 $(BIN)/realsched-churn.log; exit 1; }; \
		cat $(BIN)/realsched-churn.out >>$(BIN)/realsched-churn.jsonl; \
		grep -v '"samples"' $(BIN)/realsched-churn.out || true; \
	done

# 10,000 Prepare/Unprepare cycles over 500 claims through the real plugin's
# gRPC socket against the integration harness, restarting the plugin every
# 500; prints its memory, goroutines and open files per lifetime (about 7
# minutes on 2 cores; docs/reliability.md has figures). SOAK_ARGS=-help
# lists the knobs.
soak: kube-binaries
	$(GO) run ./test/soak $(SOAK_ARGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd test/helm && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd test/bench/packing && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd deployments/grafana/gen && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	$(GO) run $(GOLANGCI_LINT) run ./...
	$(GO) run $(LOGCHECK) -check-contextual -config logcheck.conf ./...
	cd test/helm && $(GO) run $(LOGCHECK) -check-contextual -config ../../logcheck.conf ./...
	cd test/bench/packing && $(GO) run $(GOLANGCI_LINT) run --config ../../../.golangci.yml ./...
	cd test/bench/packing && $(GO) run $(LOGCHECK) -check-contextual -config ../../../logcheck.conf ./...
	cd deployments/grafana/gen && $(GO) run $(GOLANGCI_LINT) run --config ../../../.golangci.yml ./...

# Rewrites the generated parts of docs/reference.md (flags of every binary,
# the chart's values) from the code; `make test` fails while they differ.
docs: dashboards
	GPUFRAC_UPDATE_DOCS=1 $(GO) test -count=1 -p 1 -run '^(TestReference|TestChartValuesReference)$$' ./cmd/... ./test/docs

# The Grafana dashboard (docs/dashboards.md), written from code by
# deployments/grafana/gen (a module of its own: the Grafana Foundation SDK
# stays out of gpufrac's go.mod) into the file for import by hand and the
# chart's copy, which its ConfigMap carries; `make test` fails while either
# differs from the generator's output.
dashboards:
	cd deployments/grafana/gen && $(GO) run . ../gpufrac.json ../../helm/gpufrac/dashboards/gpufrac.json

# A local control plane with two simulated 8 x H200 nodes running the demo's
# pods; see demo/run.sh. DEMO_ARGS=-wait keeps the cluster until Ctrl-C.
demo: build
	@./demo/run.sh $(DEMO_ARGS)

# etcd, kube-apiserver, kube-scheduler and kube-controller-manager v1.37.2
# for the integration harness, built from the Go module proxy once per
# machine (15 to 20 minutes on 2 cores, kube-apiserver most of it) into
# ${XDG_CACHE_HOME:-~/.cache}/gpufrac/kube-v1.37.2; instant afterwards.
# GPUFRAC_KUBE_VERSION=v1.36.3 builds the compatibility tier's instead
# (test-compat does).
kube-binaries:
	@$(GO) run ./test/cmd/kube-binaries -q -node

# Every artefact a release publishes, into bin/release/$(VERSION)/, without
# Docker and reproducibly (docs/releasing.md; test/release has the logic):
# the chart package, the image as an OCI archive for linux/amd64 and
# linux/arm64 with an SBOM each, kubectl-gpufrac's archives, the filled krew
# manifest and SHA256SUMS. The arm64 image's cross compiler comes from
# Debian with `apt-get download` (nothing installed); RELEASE_ARGS=
# "-image-arches amd64" leaves it out. SOURCE_DATE_EPOCH defaults to HEAD's
# commit time.
VERSION ?=
RELEASE_ARGS ?=
release:
	@test -n "$(VERSION)" || { echo "make release VERSION=x.y.z: VERSION is required"; exit 1; }
	$(GO) run ./test/cmd/release -version $(VERSION) $(RELEASE_ARGS)

clean:
	rm -rf $(BIN)
