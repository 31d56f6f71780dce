# wmrl build and test entry points. `make test` is what CI runs (.ci/run):
# it starts a real Kafka broker and Redis (deploy/local/services.sh) unless
# they already answer, runs every suite against them, and stops what it
# started even when a suite fails.

SHELL := /bin/bash
GO ?= go
LOCAL_DIR ?= $(or $(WMRL_LOCAL_DIR),$(CURDIR)/.local)
KAFKA_PORT ?= $(or $(WMRL_KAFKA_PORT),9092)
REDIS_PORT ?= $(or $(WMRL_REDIS_PORT),6379)
# Expanded once: `test` exports WMRL_REGISTRY_PORT from it, which a recursive definition would
# make refer to itself.
ifeq ($(origin REGISTRY_PORT),undefined)
REGISTRY_PORT := $(or $(WMRL_REGISTRY_PORT),8481)
endif
SERVICES := deploy/local/services.sh
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
FUZZTIME ?= 10s

.PHONY: schemas schemas-check all build test test-suites test-go test-python test-trainers test-trainers-suite services-up services-down services-status \
	lint fmt-check vet staticcheck compose-check k8s-check fuzz-smoke clean test-cluster test-redis-ha chaos chaos-short capacity \
	soak soak-short

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/wmrl ./cmd/wmrl

# The services the integration tests use (Kafka, Redis, the schema registry of
# deploy/local/registry.sh); internal/testenv reads these.
# WMRL_REQUIRE_SERVICES=1 turns a missing or unreachable service into a test
# failure instead of a skip.
test: export WMRL_TEST_KAFKA = 127.0.0.1:$(KAFKA_PORT)
test: export WMRL_TEST_REDIS = redis://127.0.0.1:$(REDIS_PORT)/0
test: export WMRL_TEST_REGISTRY = http://127.0.0.1:$(REGISTRY_PORT)/apis/ccompat/v7
test: export WMRL_REGISTRY_PORT = $(REGISTRY_PORT)
test: export WMRL_REQUIRE_SERVICES = 1
# A state file of its own, so `down` stops only what this run's `up` started
# and leaves a `make services-up` broker alone.
test: export WMRL_SERVICES_STATE = $(LOCAL_DIR)/services.test.state
test:
	@rc=0; $(SERVICES) up || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory -k test-suites || rc=$$?; \
	else echo "make test: services did not come up (exit $$rc)" >&2; fi; \
	$(SERVICES) down || true; \
	if [ $$rc -ne 0 ]; then echo "make test: failed (exit $$rc)" >&2; fi; \
	exit $$rc

# Every suite that runs against the live services, in order; -k above runs
# all of them even when one fails. To add a suite, list its target here and
# define it below (e.g. `test-python` for the trainer client in python/).
test-suites: test-go test-python

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	@# ThreadSanitizer cannot run under RLIMIT_AS, so the sandbox's memory-limit cases, its
	@# exact pool timing and the hostile-job suites (as root and as an unprivileged stage: the
	@# containment table docs/security.md must equal, and the grade-forging attacks of
	@# TestHostileJobsGrade) run once more without -race.
	$(GO) test -count=1 -timeout 20m -run 'TestCommand|TestPool|TestHostileJobs' ./consumers/sandbox
	@# The peak-RSS bounds of correct, the stage runtime, the trainer, the dashboard, bounded reads and
	@# the analytics tap under hostile input (decompression
	@# bombs, a flood of 400,000 runs, hostile manifests) hold for the binary users run: the race detector multiplies memory,
	@# so under -race these tests check everything but the bound, and here the bound.
	$(GO) test -count=1 -timeout 10m -run 'TestConsumerSkipsBombsOnBroker|TestConsumerRunFloodOnBroker|TestHostileManifestsRSS' ./consumers/correct
	$(GO) test -count=1 -timeout 5m -run 'TestTapSkipsDecompressionBomb' ./sinks/analytics
	$(GO) test -count=1 -timeout 5m -run 'SkipsDecompressionBomb' ./internal/stage ./sinks/trainer ./dashboard ./internal/topicread
	@# The dashboard in headless Chromium during a demo run (built without -race: see the test).
	@# Needs Debian's chromium; a missing one fails here (WMRL_REQUIRE_SERVICES=1). Screenshots
	@# go to $(LOCAL_DIR)/test-artifacts.
	WMRL_TEST_ARTIFACTS=$(LOCAL_DIR)/test-artifacts $(GO) test -count=1 -timeout 5m -run TestDashboardInBrowser ./dashboard

PYTHON ?= $(shell command -v python3.11 || command -v python3)
PY_VENV ?= $(CURDIR)/python/.venv

# The trainer client in python/: a virtualenv with the package and its test extras, then pytest
# against the live broker and Redis (WMRL_TEST_KAFKA etc. come from `test`). pytest's exit
# status 5 (no test collected) counts as a failure.
test-python:
	@test -x $(PY_VENV)/bin/python || $(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check './python[test]'
	@rc=0; cd python && $(PY_VENV)/bin/python -m pytest -p no:cacheprovider -ra tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test-python: pytest collected no tests" >&2; rc=1; fi; exit $$rc

# Real trainer frameworks against the live services (brought up and down as in `test`): TRL 1.16
# trains a tiny Qwen2 through the stages, TRL's async scoring process, verl 0.9.1's reward loop and
# OpenRLHF 0.11.2's executor score through them, slime 0.3.1's reward/advantage hooks and prime-rl's
# score_group are replayed through them, TRL's ORS client and the ORS spec's requests drive the ORS
# server, every README recipe runs, and the torch tests run (every test marked `trainers` or
# `torch`). The venv (python/requirements-trainers*.txt) is
# cached by python/scripts/trainers-venv.sh under ~/.cache/wmrl, keyed by those files' hash: ≈ 6 GB
# and 6–9 min cold, 0 s warm. A skipped test fails the target (WMRL_TEST_REQUIRE_TRAINERS=1).
test-trainers: export WMRL_TEST_KAFKA = 127.0.0.1:$(KAFKA_PORT)
test-trainers: export WMRL_TEST_REDIS = redis://127.0.0.1:$(REDIS_PORT)/0
test-trainers: export WMRL_REQUIRE_SERVICES = 1
test-trainers: export WMRL_SERVICES_STATE = $(LOCAL_DIR)/services.trainers.state
# The trainer suites do not use the schema registry: no JVM started for nothing.
test-trainers: export WMRL_SERVICES_REGISTRY = 0
test-trainers:
	@rc=0; $(SERVICES) up || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory test-trainers-suite || rc=$$?; \
	else echo "make test-trainers: services did not come up (exit $$rc)" >&2; fi; \
	$(SERVICES) down || true; \
	if [ $$rc -ne 0 ]; then echo "make test-trainers: failed (exit $$rc)" >&2; fi; \
	exit $$rc

# The suite itself, for services that are already up. The checkout's python/src comes first on
# PYTHONPATH: the cached venv holds the client's dependencies, never a stale copy of the client.
# test_registry_reader.py and test_registry_real_run.py import confluent-kafka's schema registry
# serdes and grpcio-tools, which the client's [test] extra installs for `make test-python` (where
# they run) and the trainer venv does not hold: they are left out here rather than failing the
# collection of a suite that would deselect them anyway.
test-trainers-suite:
	@venv=$$(PYTHON=$(PYTHON) python/scripts/trainers-venv.sh) || exit $$?; rc=0; cd python && \
	PYTHONPATH=$(CURDIR)/python/src HF_HUB_OFFLINE=1 WMRL_TEST_REQUIRE_TRAINERS=1 \
	WMRL_TEST_ARTIFACTS=$(LOCAL_DIR)/test-artifacts \
	$$venv/bin/python -m pytest -p no:cacheprovider -ra -m 'trainers or torch' \
		--ignore=tests/test_registry_reader.py --ignore=tests/test_registry_real_run.py tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test-trainers: pytest collected no tests" >&2; rc=1; fi; exit $$rc

# The 3-broker failover test (deploy/local/cluster.sh): a leader and the active controller are
# killed mid-run. About 2 minutes; needs java, the broker jars and redis-server, not the shared
# services.
test-cluster:
	WMRL_TEST_CLUSTER=1 $(GO) test -count=1 -timeout 10m -run TestClusterFailover -v ./cmd/wmrl

# Redis Cluster (3 masters, 1 replica each) and Sentinel failover under a running correct
# (deploy/local/redis-ha.sh); also part of `make test`. Needs the broker of `make test`.
test-redis-ha:
	$(GO) test -count=1 -timeout 5m -run TestRedisHAFailover -v ./consumers/correct

# The fault harness (internal/chaos): real stages as processes on a broker and Redis of its own,
# SIGKILLs, a broker killed inside a transaction, Redis flushed and killed, a zombie, scale-out;
# every advantage row counted. chaos-short: a few thousand rollouts; chaos: ≥ 100k per scenario.
chaos:
	WMRL_CHAOS=full $(GO) test -tags chaos -count=1 -timeout 4h -run TestChaos -v ./internal/chaos

chaos-short:
	WMRL_CHAOS=short $(GO) test -tags chaos -count=1 -timeout 60m -run TestChaos -v ./internal/chaos

# The measurements behind docs/capacity.md (bench/capacity.sh): about 3 minutes on the services
# of `make services-up`; prints the tables and the fleet estimate. Not part of `make test`.
capacity:
	GO=$(GO) bench/capacity.sh

# The soak (internal/soak): ≥ 1,000 runs start, stream and end in compressed time against 3
# correct processes on a 3-broker cluster with a Redis Cluster, through rolling restarts and
# failovers; RSS, heap, goroutines, live states, series, changelog and Redis bytes must stay flat
# in the ended runs. Plots, CSV and summary.md in .local/soak/<time>-<mode>/. soak: 20–40 min;
# soak-short: the same soak with 200 runs, under 3 min. WMRL_SOAK_RUNS overrides the run count.
soak:
	WMRL_SOAK=full $(GO) test -tags soak -count=1 -timeout 120m -run TestSoak -v ./internal/soak

soak-short:
	WMRL_SOAK=short $(GO) test -tags soak -count=1 -timeout 15m -run TestSoak -v ./internal/soak

services-up:
	$(SERVICES) up

services-down:
	$(SERVICES) down

services-status:
	$(SERVICES) status

lint: fmt-check vet staticcheck schemas-check

# schemas/ is the single source of every topic's schema (docs/formats.md). `make schemas`
# regenerates the checked-in code from it: Go into topics/wirepb (protoc-gen-go), Python into
# python/src/wmrl_client/wirepb (protoc's own Python generator). `make schemas-check` regenerates
# into a temporary directory and fails on any difference, so code and schemas cannot drift.
schemas:
	@deploy/local/schemas.sh gen .
schemas-check:
	@deploy/local/schemas.sh check

fmt-check:
	@out=$$(find . -name '*.go' -not -path './.local/*' -not -path './.git/*' -print0 | xargs -0 -r gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needed:" >&2; echo "$$out" >&2; exit 1; fi

# The root module and the two nested ones (the Helm/Compose checker, the format trial): a nested
# module is outside `./...`, and an API change in the root can break it unseen.
MODULES := . deploy/helm/check bench/formattrial

vet:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done

staticcheck:
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@set -e; for m in $(MODULES); do (cd $$m && $(STATICCHECK) ./...); done

# Validates docker-compose.yml with no profile, each profile and all of them: with compose-go
# (the loader `docker compose config` uses: Compose schema, interpolation, merge keys) plus the
# rules a Linux engine needs (deploy/helm/check/compose.go), and also with `docker compose
# config` when the docker CLI has the Compose plugin.
compose-check:
	cd deploy/helm/check && $(GO) run . -compose ../../../docker-compose.yml
	@if docker compose version >/dev/null 2>&1; then \
		for p in "" policy task world-model '*'; do \
			docker compose -f docker-compose.yml $${p:+--profile "$$p"} config -q || exit 1; \
		done; echo "compose-check: docker compose config ok for every profile"; \
	fi

# Renders deploy/helm/wmrl with Helm's engine (Go SDK, helm.sh/helm/v4) for the default and the
# production-like values and validates every manifest offline: Kubernetes API types, the
# vendored Strimzi/KEDA/prometheus-operator CRD schemas, cross-object rules. The checker is its
# own Go module (deploy/helm/check), so the main module has no Helm or Kubernetes dependency.
K8S_CHECK := cd deploy/helm/check && $(GO)
k8s-check:
	$(K8S_CHECK) vet ./...
	$(K8S_CHECK) test -count=1 ./...
	$(K8S_CHECK) run . -chart ../wmrl
	$(K8S_CHECK) run . -chart ../wmrl -f ../wmrl/ci/production-values.yaml
	$(K8S_CHECK) run . -chart ../wmrl -f ../wmrl/ci/runtimeclass-values.yaml
	$(K8S_CHECK) run . -chart ../wmrl -f ../wmrl/ci/private-proc-values.yaml
	$(K8S_CHECK) run . -compose ../../../docker-compose.yml

# Runs every Go fuzz target briefly (FUZZTIME each), to catch decoders that
# panic on the first odd input; real fuzzing runs longer by hand.
fuzz-smoke:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) deploy/local/fuzz-smoke.sh

clean:
	rm -rf bin
