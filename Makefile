# Quarry — every target works on a fresh machine by itself (it creates the virtualenv when missing).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
GENERATED := services/generated
PYTEST_ARGS ?=

# One image per service: $(IMAGE_REPO)-<service>:$(IMAGE_TAG), e.g. quarry-agent:0.1.0;
# IMAGE_REPO=registry.example.com/quarry gives registry.example.com/quarry-agent:0.1.0.
SERVICES := search-tool llm-gateway agent
SERVICE ?=
IMAGE_REPO ?= quarry
IMAGE_TAG ?= 0.1.0
CONTAINER_TOOL ?= $(shell command -v podman || command -v docker || command -v buildah)
# The base image: the Containerfile's exact tag unless PYTHON_IMAGE is given, e.g. pinned by the
# digest `make base-image-digest` prints (PYTHON_IMAGE=docker.io/library/python:3.11.14-...@sha256:...).
CONTAINERFILE_BASE := $(shell sed -n 's/^ARG PYTHON_IMAGE=//p' Containerfile)
PYTHON_IMAGE ?=
# A private package index and an extra CA bundle (a TLS-intercepting proxy) for the image build.
PIP_INDEX_URL ?=
EXTRA_CA_FILE ?=

.PHONY: help setup lock check-lock protos check-protos lint test run eval eval-beir bench clean vespa-package image images \
	base-image-digest k8s local-model local-model-serve run-local real-model-proof

help:
	@echo "make run    - start search tool, LLM gateway and agent locally (offline demo)"
	@echo "make test   - lint, generated-code check and the whole test suite (what CI runs)"
	@echo "make image SERVICE=agent - build one service's image (search-tool | llm-gateway | agent; podman, docker or buildah)"
	@echo "make images - build all three images; PYTHON_IMAGE=...@sha256:... pins the base"
	@echo "make base-image-digest - pull the base image and print it pinned by digest (podman or docker)"
	@echo "make k8s    - render every k8s/ overlay into k8s/rendered/ (kubectl kustomize)"
	@echo "make run-local - the same on a real local model (make local-model prepares it once, ~1.1 GB)"
	@echo "make real-model-proof - the real model answers three questions end to end (CI runs it)"
	@echo "make lock   - refresh requirements/*.lock (hashes) from pyproject.toml after changing a pin"
	@echo "make setup | protos | lint | eval | bench | clean | vespa-package"

# Installs exactly requirements/dev.lock (every package pinned, every file hash-checked), then
# Quarry itself without resolving anything; refuses a lock that pyproject.toml has moved past.
$(STAMP): pyproject.toml requirements/dev.lock
	$(PYTHON) scripts/lock.py --check
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/dev.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)
	@test -f $(GENERATED)/quarry/__init__.py || $(MAKE) protos

protos: $(STAMP)
	$(PY) scripts/gen_protos.py $(GENERATED)

# requirements/*.lock from pyproject.toml (scripts/lock.py, uv pip compile --generate-hashes):
# run after changing a pin; versions already locked stay unless a pin moves them.
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(PY) -m pip install --quiet --disable-pip-version-check \
		"$$(grep -o '"uv==[^"]*"' pyproject.toml | tr -d '"')"
	$(PY) scripts/lock.py

# Fails when a lock file no longer carries pyproject.toml's pins (offline; `make lock` fixes it).
check-lock:
	$(PYTHON) scripts/lock.py --check

# Fails when the committed generated code differs from what the protos produce.
check-protos: $(STAMP)
	rm -rf .protos-check && $(PY) scripts/gen_protos.py .protos-check
	diff -r $(GENERATED) .protos-check || { echo "generated code is stale: run 'make protos'"; rm -rf .protos-check; exit 1; }
	rm -rf .protos-check

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/buf lint
	$(BIN)/buf format -d --exit-code
	@if git rev-parse --verify -q HEAD~1 >/dev/null && git cat-file -e HEAD~1:protos 2>/dev/null; then \
		echo "buf breaking against HEAD~1"; \
		$(BIN)/buf breaking --against '.git#ref=HEAD~1'; \
	else echo "buf breaking: no previous commit with protos, skipped"; fi

test: lint check-protos check-lock
	$(BIN)/pytest $(PYTEST_ARGS)

run: setup
	@echo "Answers come from the offline extractive answerer. For a real local model (Qwen2.5-Coder-1.5B,"
	@echo "~1.1 GB downloaded once): make run-local   (docs/local-model.md)"
	$(BIN)/quarry run

# The local model route (docs/local-model.md): the model assembled and verified under var/llm/,
# its server in its own virtualenv var/llm-venv; threads, window and port are settings.
# LLM_RERANK=1: a second server on LLM_PORT+1 judges the agent's search hits (the `rerank` route).
# LLM_EXPAND=1: the agent expands its search queries with a passage the model writes (HyDE).
LLM_PORT ?= 8000
LLM_THREADS ?= 1
LLM_CONTEXT ?= 4096
LLM_RERANK ?=
LLM_EXPAND ?=
local-model:
	$(PYTHON) scripts/local_model.py prepare
	@echo "serve it: make local-model-serve   |   Quarry on it: make run-local"

local-model-serve: local-model
	$(PYTHON) scripts/local_model.py serve --port $(LLM_PORT) --threads $(LLM_THREADS) --context $(LLM_CONTEXT)

run-local: setup local-model
	$(PYTHON) scripts/local_model.py run --port $(LLM_PORT) --threads $(LLM_THREADS) --context $(LLM_CONTEXT) --quarry $(BIN)/quarry $(if $(LLM_RERANK),--rerank) $(if $(LLM_EXPAND),--expand)

# CI proof that the real model drives Quarry (tests/real_model/): model prepared (downloaded on a
# fresh machine), model server + the three services started, three questions; wall time printed.
real-model-proof: setup
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory local-model && \
	QUARRY_REAL_MODEL=1 $(BIN)/pytest tests/real_model -q -s -p no:cacheprovider; rc=$$?; \
	echo "real-model-proof: wall time $$(( $$(date +%s) - start )) s (model preparation included), exit $$rc"; \
	exit $$rc

# ENGINE=vespa: SciFact against the Vespa at $QUARRY_VESPA_URL (bench/results/scifact-vespa.json).
# ENGINE=postgres: against $QUARRY_POSTGRES_DSN or an embedded PostgreSQL (scifact-postgres.json).
ENGINE ?= lancedb
eval: setup
	$(PY) bench/eval_scifact.py --engine $(ENGINE) $(if $(filter vespa postgres,$(ENGINE)),--out bench/results/scifact-$(ENGINE).json,--out bench/results/scifact.json)

# Any BEIR-format directory (kept outside the repository): KEYWORD / SEMANTIC / HYBRID (configured
# and calibrated) nDCG@10, then the same through gRPC; WORK_DIR keeps its collection + vectors.
eval-beir: setup
	@test -n "$(DATASET)" || { echo "make eval-beir DATASET=/path/to/beir-dir [WORK_DIR=...] [SPLIT=test]"; exit 2; }
	$(PY) bench/eval_beir.py --dataset $(DATASET) $(if $(WORK_DIR),--work-dir $(WORK_DIR)) $(if $(SPLIT),--split $(SPLIT)) --grpc

bench: setup
	$(PY) bench/search_latency.py
	$(PY) bench/ingest_throughput.py
	$(PY) bench/api_ingest_speed.py
	$(PY) -m bench.load_e2e

# The Vespa application package, rendered from its one definition and zipped for `vespa deploy`
# or the config server's prepareandactivate (a test checks the checked-in copy is current).
vespa-package: setup
	$(PY) scripts/gen_vespa_app.py --zip build/vespa-app.zip

# One service's image: its lock (requirements/$(SERVICE).lock) and its target in the Containerfile.
image:
	@test -n "$(CONTAINER_TOOL)" || { echo "make image needs podman, docker or buildah"; exit 1; }
	@test "$(words $(SERVICE))" = 1 && test -n "$(filter $(SERVICE),$(SERVICES))" \
		|| { echo "make image SERVICE=<one of: $(SERVICES)> (or make images: all three)"; exit 2; }
	$(CONTAINER_TOOL) build -f Containerfile --build-arg PYTHON_IMAGE=$(or $(PYTHON_IMAGE),$(CONTAINERFILE_BASE)) \
		$(if $(PIP_INDEX_URL),--build-arg PIP_INDEX_URL=$(PIP_INDEX_URL)) \
		$(if $(EXTRA_CA_FILE),--build-arg EXTRA_CA_PEM="$$(cat $(EXTRA_CA_FILE))") \
		--build-arg SERVICE=$(SERVICE) --target $(SERVICE) -t $(IMAGE_REPO)-$(SERVICE):$(IMAGE_TAG) .

images:
	for service in $(SERVICES); do $(MAKE) --no-print-directory image SERVICE=$$service || exit 1; done

# Prints the Containerfile's base image pinned by the digest your registry serves for its tag:
# review it, then build with `make images PYTHON_IMAGE=<what it printed>`.
base-image-digest:
	@test -n "$(CONTAINER_TOOL)" || { echo "make base-image-digest needs podman or docker"; exit 1; }
	$(CONTAINER_TOOL) pull $(CONTAINERFILE_BASE)
	@echo "$(CONTAINERFILE_BASE)@$$($(CONTAINER_TOOL) image inspect --format '{{index .RepoDigests 0}}' $(CONTAINERFILE_BASE) | sed 's/.*@//')"

k8s: setup
	mkdir -p k8s/rendered
	for overlay in k8s/overlays/*/; do \
		$(BIN)/kubectl kustomize "$$overlay" > "k8s/rendered/$$(basename $$overlay).yaml" || exit 1; \
	done

clean:
	rm -rf $(VENV) .protos-check .mypy_cache .ruff_cache .pytest_cache
