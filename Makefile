# `make demo` and `make test` do every set-up step themselves, each only the ones it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
SHELL := /bin/bash

.PHONY: demo test docs bench soak lint setup setup-demo setup-test host-deps-demo host-deps-test clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { echo "streambench needs Python 3.11 or later as $(PYTHON) (make PYTHON=python3.11 …)"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { echo "cannot create a virtualenv: install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(PIP) install -q --upgrade pip

# The live tool and the report extra (PySpark, matplotlib): what `make demo` runs. A virtualenv
# set up for the tests has them already.
$(VENV)/.installed-report: pyproject.toml | $(BIN)/python
	@if [ $(VENV)/.installed-dev -nt pyproject.toml ]; then touch $@; else \
		echo "$(PIP) install -q -e '.[report]'" && $(PIP) install -q -e '.[report]' && touch $@; fi

# Everything, plus the test, lint and type-check tools.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[dev]'
	@touch $@

# System packages (.ci/host-deps.sh): for the demo redis-server and Java (Spark); for the tests
# also redis-tools, Maven, docker.io, docker-compose and debootstrap, then a Docker engine that
# answers (started when none does). The demo runs local processes and starts no engine.
host-deps-demo:
	@bash .ci/host-deps.sh demo

host-deps-test:
	@bash .ci/host-deps.sh test
	@bash .ci/docker-engine.sh

setup-demo: host-deps-demo $(VENV)/.installed-report

setup-test: host-deps-test $(VENV)/.installed-dev

setup: setup-test

demo: setup-demo
	$(BIN)/streambench run redis redis:aof --runtime local --workload redis-latency-1kb --report

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/mypy loadgen collectors compose analysis tui

# The project's modules are byte-compiled first: where PYTHONDONTWRITEBYTECODE is set, every
# process the tests start (workers, `streambench` commands) would compile them from source again,
# about 0.3 s of CPU each. Python reads the files even so, and ignores one older than its source.
# The tests run side by side in TEST_PROCESSES test processes (pytest-xdist; tests that share a
# broker, the Spark session or the Docker engine stay on one, see tests/conftest.py), then the
# few marked serial alone.
TEST_PROCESSES ?= 3
test: setup-test lint docs
	$(BIN)/python -m compileall -q loadgen collectors compose analysis tui tests
	$(BIN)/python -m pytest -q -raR --durations=30 -n $(TEST_PROCESSES) --dist loadgroup -m "not serial"
	$(BIN)/python -m pytest -q -raR --durations=10 -m serial

# The documentation site, as strict as CI builds it: a broken link or anchor fails (a few seconds).
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup-test
	$(BIN)/python tests/bench/memory_recall.py
	$(BIN)/python tests/bench/redis_produce.py
	$(BIN)/python tests/bench/redis_consume.py
	$(BIN)/python tests/bench/paced_cost.py
	$(BIN)/python tests/bench/syscall_cost.py
	$(BIN)/python tests/bench/kafka_produce.py
	$(BIN)/python tests/bench/pulsar_produce.py
	$(BIN)/python tests/bench/pulsar_latency_profile.py
	$(BIN)/python tests/bench/nats_produce.py
	$(BIN)/python tests/bench/report_scale.py
	$(BIN)/python tests/bench/dashboard_cpu.py
	$(BIN)/python tests/bench/report_effect.py
	$(BIN)/python tests/bench/prometheus_scrape.py
	$(BIN)/python tests/bench/metrics_cost.py
	$(BIN)/python tests/bench/ray_placement.py
	$(BIN)/python tests/bench/ray_coordinator_cost.py

# 60 minutes at 10,000 msg/s on a local redis-server: RSS of every process per minute
soak: setup-test
	$(BIN)/python tests/bench/soak.py

clean:
	rm -rf $(VENV) *.egg-info build dist .pytest_cache .mypy_cache .ruff_cache
