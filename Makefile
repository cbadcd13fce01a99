# Streamwarden: one machine, no Docker. `make demo` to try it, `make test` for what CI runs.
.DEFAULT_GOAL := help
.PHONY: help install demo stop test check bench bench-flink

UV_VERSION := 0.13.9
VENV := .venv
UV := .tools/bin/uv
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python

help:
	@echo "make install  create .venv from uv.lock (bootstraps uv into .tools/)"
	@echo "make demo     install, then start the embedded platform (S3, Airflow, generator, jobs)"
	@echo "make stop     stop the embedded platform, streaming drivers included"
	@echo "make test     install, then run the whole test suite (CI runs make check, then this)"
	@echo "make check    ruff format --check, ruff check (the import walls too), mypy --strict"
	@echo "make bench    print benchmark figures"
	@echo "make bench-flink  the jobs against PyFlink SQL (installs .tools/flink-venv on first use)"

$(UV):
	python3 -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# The stamp is newer than the lock, pyproject and this file only after a successful sync, so an
# up-to-date install costs nothing and a changed lock re-syncs. Bytecode is compiled at install:
# where PYTHONDONTWRITEBYTECODE is set (or the venv is read-only) Python never caches it, and every
# `warden` call, DAG parse and driver start compiled each module it imported (seconds each time).
$(VENV)/.synced: uv.lock pyproject.toml Makefile | $(UV)
	$(UV) sync --locked --compile-bytecode
	@touch $@

install: $(VENV)/.synced

demo: install
	$(VENV)/bin/warden platform up

stop:
	$(VENV)/bin/warden platform down

test: install
	$(VENV)/bin/python -m pytest tests/

# ruff covers every Python file of the repo (ops, jobs, synthetic, plugins, dags, benchmarks,
# tests), each under the ruff.toml nearest to it; mypy checks the packages (strict, pyproject.toml).
check: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ops jobs synthetic

bench: install
	$(VENV)/bin/python -m benchmarks.run

bench-flink: install
	$(VENV)/bin/python -m benchmarks.run --only flink
