# Streamwarden: one machine, no Docker. `make demo` to try it, `make test` for what CI runs.
.DEFAULT_GOAL := help
.PHONY: help install system-deps demo stop test test-fast check bench bench-flink bench-peers checkov-tool checkov

UV_VERSION := 0.13.9
VENV := .venv
UV := .tools/bin/uv
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python
PYTEST := $(VENV)/bin/python -m pytest
# The suite mostly waits (JVM cold starts, Airflow, polling), so it runs more workers than cores.
# Each worker holds its own SparkSession, S3 server and Airflow database plus the drivers its test
# starts (1-3 GB; the whole machine peaked at 12 GB). 3 rather than 4 on 2 cores: Spark's Python
# workers must connect back within 10 s and a few tests wait a minute for a driver's cold start,
# and 4 workers on a busy machine broke both; `make test TEST_WORKERS=4` where cores are idle.
# `loadgroup` hands tests out one by one but keeps each xdist_group on one worker.
TEST_WORKERS ?= 3
# Markers tests/conftest.py derives from the fixtures a test uses; `slow` is set by hand, and so are
# `prometheus` and `browser` (Debian's Prometheus tools and Chromium, which only `make test`
# installs: the fast tier needs no Debian package).
FAST_TESTS := not spark and not s3 and not airflow and not slow and not prometheus and not browser

help:
	@echo "make install  create .venv from uv.lock (bootstraps uv into .tools/)"
	@echo "make demo     install, then start the embedded platform (S3, Airflow, generator, jobs)"
	@echo "make stop     stop the embedded platform, streaming drivers included"
	@echo "make test     install, then run the whole test suite in parallel (what CI runs; TEST_WORKERS=$(TEST_WORKERS))"
	@echo "make test-fast  the tests that start no Spark, S3, Airflow, Prometheus tool or browser (a few minutes; day-to-day work)"
	@echo "make check    ruff format --check, ruff check (the import walls too), mypy --strict, the import contracts"
	@echo "make bench    print benchmark figures"
	@echo "make bench-flink  the jobs against PyFlink SQL (installs .tools/flink-venv on first use)"
	@echo "make bench-peers  the router against bare PySpark, PyFlink json and pyarrow, rotated rounds; then the sessionizer against PyFlink json and the router at a 5 s trigger"
	@echo "make checkov  scan terraform/ with checkov, offline (installs .tools/checkov on first use)"

$(UV):
	python3 -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# The stamp is newer than the lock, pyproject and this file only after a successful sync, so an
# up-to-date install costs nothing and a changed lock re-syncs. Bytecode is compiled at install:
# where PYTHONDONTWRITEBYTECODE is set (or the venv is read-only) Python never caches it, and every
# `warden` call, DAG parse and driver start compiled each module it imported (seconds each time).
# Spark's Python workers import PySpark from the zips in its home instead, which have no bytecode
# until ops.driver.worker_bytecode adds it (0.6 CPU-seconds a worker otherwise).
$(VENV)/.synced: uv.lock pyproject.toml Makefile | $(UV)
	$(UV) sync --locked --compile-bytecode
	$(VENV)/bin/python -m ops.driver.worker_bytecode
	@touch $@

install: $(VENV)/.synced

# Debian packages the tests drive for real: Prometheus and its tools (promtool, amtool), headless
# Chromium for the UI tests. Installed when missing and running as root (CI); otherwise the missing
# ones are named and the target fails. The Hive metastore's PostgreSQL JDBC driver comes with
# `make install` (PyPI wbjdbc, ops.warehouse.metastore), so `make demo` needs none of these.
SYSTEM_PACKAGES := prometheus prometheus-alertmanager prometheus-pushgateway chromium
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "missing Debian packages (install as root): $$missing" >&2; exit 1; fi; \
	echo "installing Debian packages: $$missing"; \
	DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null

demo: install
	$(VENV)/bin/warden platform up

stop:
	$(VENV)/bin/warden platform down

# --durations: the slowest tests close the log, for whoever works on the suite's wall time; every
# test's times go to TEST_DURATIONS (tests/support/durations.py), which `.ci/run` prints.
TEST_DURATIONS ?= .ci-out/test-durations.txt
# Every JVM the suite starts maps one class-data archive of Spark's classes, dumped on the first
# run on a machine and checkout (under 2 minutes on a quiet machine, kept in ~/.cache/streamwarden/cds/):
# `python -m tests.support.jvm` prints the options.
test: install system-deps
	JDK_JAVA_OPTIONS="$$($(VENV)/bin/python -m tests.support.jvm)" $(PYTEST) --numprocesses $(TEST_WORKERS) --dist loadgroup --durations 25 --durations-file $(TEST_DURATIONS) tests/

# Serial: the fast tier takes about as long as starting xdist workers would.
test-fast: install
	$(PYTEST) -m "$(FAST_TESTS)" tests/

# ruff covers every Python file of the repo (ops, jobs, synthetic, plugins, dags, benchmarks,
# tests), each under the ruff.toml nearest to it; mypy checks the packages (strict, pyproject.toml);
# lint-imports holds the import contracts of pyproject.toml ([tool.importlinter]) over the packages,
# the Airflow adapters' among them (found on plugins/, as Airflow finds them).
check: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ops jobs synthetic
	PYTHONPATH=plugins $(VENV)/bin/lint-imports

bench: install
	$(VENV)/bin/python -m benchmarks.run

bench-flink: install
	$(VENV)/bin/python -m benchmarks.run --only flink

bench-peers: install
	$(VENV)/bin/python -m benchmarks.peers

# checkov pins libraries Airflow also pins, differently, so it lives in a venv of its own, installed
# once from the pinned requirements file (again when that file changes). tests/deploy runs it.
CHECKOV_VENV := .tools/checkov
# Offline (--skip-download); terraform test files are not configuration and are not scanned.
CHECKOV_OUTPUT ?= --quiet --compact
CHECKOV_ARGS := --directory terraform --framework terraform --skip-download --skip-path 'tests/.*\.tftest\.hcl'
# uv, not pip: a fresh clone's first install takes seconds, not the minutes pip took.
$(CHECKOV_VENV)/.installed: terraform/checkov-requirements.txt | $(UV)
	$(UV) venv --quiet --clear --python python3 $(CHECKOV_VENV)
	$(UV) pip install --quiet --python $(CHECKOV_VENV)/bin/python -r terraform/checkov-requirements.txt
	@touch $@

checkov-tool: $(CHECKOV_VENV)/.installed

checkov: checkov-tool
	$(CHECKOV_VENV)/bin/checkov $(CHECKOV_ARGS) $(CHECKOV_OUTPUT)
