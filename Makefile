# `make demo` and `make test` do every set-up step themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHELL := /bin/bash

.PHONY: demo test bench lint setup host-deps clean

$(BIN)/streambench: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { echo "cannot create a virtualenv: install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

# System packages: redis-server for the local runtime, a Java runtime for Spark, Docker for
# the docker runtime; then a Docker engine that answers (started when none does).
host-deps:
	@bash .ci/host-deps.sh
	@bash .ci/docker-engine.sh

setup: host-deps $(BIN)/streambench

demo: setup
	$(BIN)/streambench run redis redis:aof --runtime local --workload redis-latency-1kb --report

lint: $(BIN)/streambench
	$(BIN)/ruff check .
	$(BIN)/mypy loadgen collectors compose analysis tui

test: setup lint
	$(BIN)/python -m pytest -q -ra

bench: setup
	$(BIN)/python tests/bench/redis_produce.py
	$(BIN)/python tests/bench/kafka_produce.py
	$(BIN)/python tests/bench/pulsar_produce.py
	$(BIN)/python tests/bench/report_scale.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache
