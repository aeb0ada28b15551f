# The two commands of the quick start: `make run` and `make test`. Both set themselves up.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PORT ?= 7071
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)

.PHONY: readme help run test test-unit test-infra lint bench gpu-bench seed model clean
.DEFAULT_GOAL := help

LINTED := shared tests function_app.py scripts bench

## help: list the targets
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed -E 's/^## ([a-z0-9-]+): (.*)/\1\t\2/' | awk -F'\t' '{ printf "  make %-17s %s\n", $$1, $$2 }'

# pip with a line per package it collects (a first setup shows progress) and without the index's
# `WARNING: Location ...` lines; the recipe fails when pip does.
PIP_PROGRESS = 2>&1 | { grep -E --line-buffered '^(Collecting|Successfully installed|ERROR)' || true; } | sed -u -E 's/^Collecting ([^ ]+).*/  collecting \1/; s/^Successfully installed.*/  installed/'

# NOTE: a laptop's python3 may be older (macOS's own is 3.9): say which to use instead of failing in pip
$(VENV)/.runtime: requirements.txt
	@test -x $(PY) || $(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null || { \
		echo "make: $(PYTHON) is not Python 3.11 or newer ($$($(PYTHON) -V 2>&1)); try: make PYTHON=python3.11 $(MAKECMDGOALS)" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing runtime dependencies into $(VENV) (first run only, about a minute)..."
	@set -o pipefail; $(PY) -m pip install --disable-pip-version-check --no-warn-script-location -r requirements.txt $(PIP_PROGRESS)
	@touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	@echo "installing test dependencies into $(VENV)..."
	@set -o pipefail; $(PY) -m pip install --disable-pip-version-check --no-warn-script-location -r requirements-dev.txt $(PIP_PROGRESS)
	@touch $@

node_modules/.installed: package.json package-lock.json
	@echo "installing azurite (npm ci)..."
	@npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## run: serve the app on http://127.0.0.1:$(PORT) from the committed model (no Redis or Azure needed)
run: $(VENV)/.runtime
	@PORT=$(PORT) PREDICTION_LOG=$${PREDICTION_LOG:-dir} $(PY) -m shared

## outcomes: decisions joined to the outcomes learned later (make run's log): each version's precision, recall, losses per day
.PHONY: outcomes
outcomes: $(VENV)/.dev
	$(PY) -m shared.stores.prediction_log.report --dir $${PREDICTION_LOG_DIR:-.run/predictions}

## outcomes-demo: 170 days of scored history and the outcomes learned since, into make run's log (then: make outcomes)
.PHONY: outcomes-demo
outcomes-demo: $(VENV)/.dev
	$(PY) scripts/demo_outcomes.py --dir $${PREDICTION_LOG_DIR:-.run/predictions}

## test: lint, then start Redis (unless one answers at REDIS_URL) and Azurite, run every test, stop them
test: lint test-unit test-infra

## test-unit: the Python tests only, with their Redis and Azurite (and the worker conformance runtimes)
# NOTE: across the cores: TEST_WORKERS pytest-xdist workers take whole files each (--dist loadfile), each
# against a Redis and an Azurite of its own (tests/README.md, "Across the cores"; a Redis that answers at
# REDIS_URL means one process). One more worker than cores: the tests wait about half their time (on 2 cores,
# 2 workers: 402-429 s, 3: 306-359 s, 4: 300 s); those that hold a CPU deadline run alone (`serial`).
# TEST_WORKERS=1 runs them in one process.
CORES := $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
TEST_WORKERS ?= $(shell echo $$(($(CORES) + 1)))
PYTEST = $(PY) -m pytest
test-unit: $(VENV)/.dev node_modules/.installed worker-venvs .venv-feast/.installed
	@PY=$(PY) SERVICE_SETS=$(TEST_WORKERS) scripts/with_services.sh $(PYTEST) -n auto --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## test-infra: offline checks of infra/ (Bicep parsed by pycep-parser, checkov) in their own venv
test-infra: .venv-infra/.installed
	@.venv-infra/bin/python -m pytest -c tests/infra/pytest.ini tests/infra -p no:cacheprovider

.venv-infra/.installed: requirements-infra.txt
	@test -x .venv-infra/bin/python || $(PYTHON) -m venv .venv-infra
	@echo "installing infra checks (pycep-parser, checkov) into .venv-infra..."
	@.venv-infra/bin/python -m pip install -q --disable-pip-version-check -r requirements-infra.txt
	@touch $@

# The conformance runtimes (tests/worker, bench/worker.py; docs/capacity.md, "Which runtime"):
# Python 3.13 + azure-functions-runtime over the app's pins, as the 3.13 worker loads them; and the
# 3.11 worker's bundled azure-functions/protobuf/grpcio in a folder put first on a 3.11 process's path.
# NOTE: the first Python 3.13 that runs (a pyenv shim on the PATH may not, when 3.13 is not selected)
PYTHON313 ?= $(shell for p in $$(command -v python3.13) $(HOME)/.pyenv/versions/3.13*/bin/python3.13; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && { echo "$$p"; break; }; done)
PIP_QUIET := -q --disable-pip-version-check --no-warn-script-location

# Feast itself (tests/features/test_feast.py, bench/feast.py): its pandas, pyarrow and protobuf never meet the app's pins.
.venv-feast/.installed: requirements-feast.txt
	@test -x .venv-feast/bin/python || $(PYTHON) -m venv .venv-feast
	@echo "installing Feast into .venv-feast (tests and bench only)..."
	@.venv-feast/bin/python -m pip install $(PIP_QUIET) -r requirements-feast.txt 2>&1 | grep -v '^WARNING: Location' || true
	@.venv-feast/bin/python -c 'import feast, feast.infra.online_stores.redis'
	@touch $@

## worker-venvs: the Python worker runtimes the conformance tests and bench.worker drive (3.13 runtime, 3.11 bundles)
.PHONY: worker-venvs
worker-venvs: .venv-worker/.installed .venv-worker311/.installed .venv-worker311-2026/.installed

# NOTE: without a Python 3.13 (Debian 12 has none; pyenv or `PYTHON313=` provide one) the 3.13 runtime's
# tests skip and say so; under CI=true they fail (tests/worker/conftest.py), so CI always runs them.
.venv-worker/.installed: requirements-worker.txt requirements-worker-httpv2.txt requirements.txt
ifeq ($(PYTHON313),)
	@echo "no Python 3.13: the worker conformance runtime is not built; tests/worker/test_runtime.py skips (PYTHON313=...)" >&2
	@if [ "$$CI" = "true" ]; then exit 2; fi
else
	@test -x .venv-worker/bin/python || $(PYTHON313) -m venv .venv-worker
	@echo "installing the Python 3.13 worker runtime and the app's pins into .venv-worker..."
	@.venv-worker/bin/python -m pip install $(PIP_QUIET) -r requirements-worker.txt 2>&1 | grep -v '^WARNING: Location' || true
	@.venv-worker/bin/python -m pip install $(PIP_QUIET) -r requirements-worker-httpv2.txt 2>&1 | grep -v '^WARNING: Location' || true
	@.venv-worker/bin/python -c 'import azure_functions_runtime, azure.functions, grpc, onnxruntime'
	@touch $@
endif

# The 3.11 worker's two bundles (tests/worker/test_bundled.py runs the app under each): until host 4.1049
# (2024: protobuf 4.25, grpcio 1.59) and since (2026: protobuf 5.29, grpcio 1.70; production runs this one).
.venv-worker311/.installed: requirements-worker311.txt
	@echo "installing the 3.11 worker's 2024 bundle into .venv-worker311..."
	@rm -rf .venv-worker311 && $(PYTHON) -m pip install $(PIP_QUIET) --target .venv-worker311 -r requirements-worker311.txt 2>&1 | grep -v '^WARNING: Location\|root' || true
	@test -d .venv-worker311/google/protobuf
	@touch $@

.venv-worker311-2026/.installed: requirements-worker311-2026.txt
	@echo "installing the 3.11 worker's 2026 bundle into .venv-worker311-2026..."
	@rm -rf .venv-worker311-2026 && $(PYTHON) -m pip install $(PIP_QUIET) --target .venv-worker311-2026 -r requirements-worker311-2026.txt 2>&1 | grep -v '^WARNING: Location\|root' || true
	@test -d .venv-worker311-2026/google/protobuf && test -d .venv-worker311-2026/grpc_tools
	@touch $@

## stubs: regenerate the V2 and fraud.scoring.v1 gRPC messages at the protobuf 4.25 gencode level (loads under 4.25 and the pins)
.PHONY: stubs
stubs:
	@rm -rf .venv-stubs && $(PYTHON) -m pip install $(PIP_QUIET) --target .venv-stubs grpcio-tools==1.59.5 protobuf==4.25.9
	PYTHONPATH=.venv-stubs $(PYTHON) -m grpc_tools.protoc -Ishared/adapters/oip/proto --python_out=shared/adapters/oip shared/adapters/oip/proto/grpc_predict_v2.proto
	PYTHONPATH=.venv-stubs $(PYTHON) -m grpc_tools.protoc -Ishared/adapters/scoring_grpc/proto/fraud/scoring/v1 --python_out=shared/adapters/scoring_grpc shared/adapters/scoring_grpc/proto/fraud/scoring/v1/scoring.proto

## lint: ruff (rules and format) and mypy (strict on shared/)
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check $(LINTED) --exclude tests/infra
	$(VENV)/bin/ruff format --check $(LINTED) --exclude tests/infra
	$(VENV)/bin/mypy --strict shared
	$(VENV)/bin/mypy function_app.py bench

## check: lint, types and the tests that need no service and no long run, at once: about 70 s on 2 cores, no Redis or Azurite
# NOTE: tests/conftest.py marks what needs a service or runs long (`make test` runs everything); the rest run on
# CHECK_WORKERS xdist workers (two a core) beside mypy: they mostly wait (retries, breakers, child processes):
# on 2 cores, 2 workers took 106 s, 3 84 s, 4 68 s; those that hold a CPU deadline run alone (`serial`). Each
# part's output is held in .run/check/: a passing one shows its last line, a failing one all of it. mypy's two
# runs keep a cache each (their options would invalidate one another's).
CHECK_WORKERS ?= $(shell echo $$((2 * $(CORES))))
CHECK_TESTS = REDIS_URL= AZURITE_BLOB_ENDPOINT= $(PYTEST) -m "not services and not long" -n $(CHECK_WORKERS) --dist loadfile --no-loadscope-reorder
.PHONY: check
check: $(VENV)/.dev
	$(VENV)/bin/ruff check $(LINTED) --exclude tests/infra
	$(VENV)/bin/ruff format --check $(LINTED) --exclude tests/infra
	@rm -rf .run/check && mkdir -p .run/check; \
	{ $(VENV)/bin/mypy --strict shared --cache-dir .mypy_cache/strict && \
	  $(VENV)/bin/mypy function_app.py bench --cache-dir .mypy_cache/bench; } >.run/check/types.log 2>&1 & jobs="types:$$!"; \
	$(CHECK_TESTS) >.run/check/tests.log 2>&1 & jobs="$$jobs tests:$$!"; \
	failed=0; for job in $$jobs; do \
		if wait $${job#*:}; then tail -n 1 .run/check/$${job%%:*}.log; else failed=1; cat .run/check/$${job%%:*}.log; fi; \
	done; exit $$failed

## bench: measure the score path against its ceiling and floor; report and plots in bench-out/
bench: $(VENV)/.dev
	@command -v wrk >/dev/null || { echo "installing wrk (apt-get)"; apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }; }
	$(PY) -m bench.run --out bench-out $(BENCH_ARGS)

## bench-rollouts: the prediction log and a shadow under load (cost vs off), and no record lost (sink healthy, sink cut for 20 s)
.PHONY: bench-rollouts
bench-rollouts: $(VENV)/.dev node_modules/.installed
	@command -v wrk >/dev/null || { echo "installing wrk (apt-get)"; apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }; }
	@PY=$(PY) scripts/with_services.sh $(PY) -m bench.rollouts --out bench-out $(BENCH_ARGS)

## soak: 20 minutes of sustained misses on two servers side by side (log on, log off): RSS and req/s a minute
.PHONY: soak
soak: $(VENV)/.dev
	@command -v wrk >/dev/null || { echo "installing wrk (apt-get)"; apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }; }
	$(PY) -m bench.soak --out bench-out $(SOAK_ARGS)

## fuzz: schemathesis from GET /api/openapi.json at a served app: >= 10,000 requests; 0 5xx, 0 hangs, 4xx all JSON
.PHONY: fuzz
FUZZ_EXAMPLES ?= 1000
fuzz: $(VENV)/.dev
	$(PY) -m bench.fuzz --examples $(FUZZ_EXAMPLES) --min-requests 10000 $(FUZZ_ARGS)

## gpu-bench: model latency by batch size, CUDA + IO binding where a GPU is usable (else CPU, and says so)
gpu-bench: $(VENV)/.runtime
	$(PY) -m bench.gpu --out bench-out

## publish-model: NAME=fraud VERSION=2 FILE=model.onnx into MODELS_DIR or the Blob container; every replica follows
.PHONY: publish-model
publish-model: $(VENV)/.runtime
	@test -n "$(NAME)" -a -n "$(VERSION)" -a -n "$(FILE)" || { echo "usage: make publish-model NAME=fraud VERSION=2 FILE=model.onnx" >&2; exit 2; }
	@$(PY) scripts/publish_model.py "$(NAME)" "$(VERSION)" "$(FILE)"

## promote-model: NAME=fraud VERSION=2 [REASON=...] serves it on every replica (the control store's pin, audited)
.PHONY: promote-model
promote-model: $(VENV)/.runtime
	@test -n "$(NAME)" -a -n "$(VERSION)" || { echo "usage: make promote-model NAME=fraud VERSION=2 [REASON=why]" >&2; exit 2; }
	@$(PY) scripts/publish_model.py "$(NAME)" "$(VERSION)" --promote --reason "$(REASON)"

## replay: FILE=events.jsonl through the queue path's batch handler, one JSON line per message
.PHONY: replay
replay: $(VENV)/.runtime
	@test -n "$(FILE)" || { echo "usage: make replay FILE=events.jsonl" >&2; exit 2; }
	@$(PY) -m shared.adapters.queue.replay "$(FILE)"

## audit: pip-audit of every package the pinned requirements install (AUDIT_SERVICE=pypi|osv; needs that service)
# NOTE: not part of `make test`: it needs a vulnerability service on the network, and where the PyPI this
# machine reaches lacks per-version JSON, every package is skipped; --strict turns that into a failure
# instead of a false "No known vulnerabilities found" (docs/reliability.md, Security checks).
AUDIT_SERVICE ?= pypi
.PHONY: audit
audit: $(VENV)/.dev
	$(VENV)/bin/pip-audit --strict --vulnerability-service $(AUDIT_SERVICE) --progress-spinner off --desc on

## seed: load the demo user features into Redis at REDIS_URL
seed: $(VENV)/.runtime
	$(PY) scripts/seed_features.py

## model: retrain the demo model (reproducible) into models/fraud/1
model: $(VENV)/.dev
	$(PY) scripts/train_demo_model.py

## candidate: a different fraud model from the demo data (CANDIDATE_ARGS="--seed 7") in .run/candidate/, for docs/rollouts.md
.PHONY: candidate
candidate: $(VENV)/.dev
	$(PY) scripts/train_candidate.py $(CANDIDATE_ARGS)

## check-platforms: requirements.txt's pins have wheels on Linux x86_64/arm64, macOS and Windows (PLATFORM_ARGS=--resolve: the whole tree)
.PHONY: check-platforms
check-platforms: $(VENV)/.runtime
	$(PY) scripts/check_platforms.py $(PLATFORM_ARGS)

## readme: rewrite the settings table (docs/settings.md) from shared/settings.py
readme: $(VENV)/.runtime
	@$(PY) scripts/readme_settings.py

## clean: remove the virtual environments, node_modules and caches
clean:
	rm -rf $(VENV) .venv-infra .venv-worker .venv-worker311 .venv-worker311-2026 .venv-feast .venv-stubs node_modules .pytest_cache .mypy_cache .ruff_cache

## capacity: size the PROFILE (sale) for the flash sale (PEAK/s, BURST x, P99_MS) from the measured figures; prints the azd env set lines
.PHONY: capacity
PEAK ?= 10000
BURST ?= 3
P99_MS ?= 50
PROFILE ?= sale
capacity: $(VENV)/.dev
	$(PY) -m bench.flashsale capacity --peak $(PEAK) --burst $(BURST) --p99-ms $(P99_MS) $(or $(CAPACITY_ARGS),--profile $(PROFILE))
