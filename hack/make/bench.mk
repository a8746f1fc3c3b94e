# Copyright The gpufrac Authors.
# SPDX-License-Identifier: Apache-2.0
#
# Benchmarks and the soak (docs/benchmarks.md); never part of `make test`. Included by the Makefile at the root.

# The packing comparison (and its chart, docs/packing.png), the Prepare
# cost against its durable-write floor and over gRPC, the webhook's
# translation latency, and the 1,000-node scale figures, in one run
# (docs/benchmarks.md has figures and method; about 5 minutes here, after
# bench-realsched, whose 64-node runs the chart shows, about 15).
bench: ## Packing, Prepare, webhook and scale benchmarks, with their charts
	$(MAKE) bench-realsched
	cd hack/bench/packing && $(GO) run . -chart $(CURDIR)/docs/packing.png -realsched $(BIN)/realsched.jsonl
	$(MAKE) bench-churn
	cd hack/bench/packing && $(GO) run . -churn $(BIN)/realsched-churn.jsonl -churn-chart $(CURDIR)/docs/packing-churn.png
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
bench-prepcompare: build ## gpufrac's kubelet plugin beside dra-example-driver's (EXAMPLE_PLUGIN=path)
	@test -n "$(EXAMPLE_PLUGIN)" || { echo "EXAMPLE_PLUGIN=<dra-example-kubeletplugin binary> is required"; exit 1; }
	@$(GO) run ./hack/cmd/kube-binaries -q
	$(GO) run ./hack/bench/prepcompare -plugin gpufrac=$(BIN)/gpufrac-kubelet-plugin -plugin example=$(EXAMPLE_PLUGIN) -claims 32 -rounds 20 -runs 2 -fresh-claims -settle-status

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
bench-realsched: ## Packing in the real kube-scheduler at 8, 64 and 1,000 nodes
	@$(GO) run ./hack/cmd/kube-binaries -q
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/realsched ./hack/bench/realsched
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
bench-churn: ## Packing under churn in the real kube-scheduler
	@$(GO) run ./hack/cmd/kube-binaries -q
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/realsched ./hack/bench/realsched
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
soak: kube-binaries ## 10,000 Prepare/Unprepare cycles through the real plugin's socket
	$(GO) run ./hack/soak $(SOAK_ARGS)
