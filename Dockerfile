# The one image of the team stack (docker-compose.yml): Airflow's components, the `warden` CLI,
# the Spark master and workers, the SeaweedFS S3 server and the streaming drivers all run from it.
# Python packages come from uv.lock exactly (`uv sync --locked` fails if the lock is stale).
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

FROM python:3.11-slim-bookworm

# Java 17 for Spark; the PostgreSQL JDBC driver for the Hive metastore database; procps for
# Spark's scripts (ps) and for the supervisor's process checks.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless libpostgresql-jdbc-java procps \
    && rm -rf /var/lib/apt/lists/*

COPY --from=uv /uv /usr/local/bin/uv

ENV APP_DIR=/opt/streamwarden
ENV UV_PROJECT_ENVIRONMENT=${APP_DIR}/.venv \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
WORKDIR ${APP_DIR}

# Dependencies first, in their own layer: a code change does not reinstall them.
COPY pyproject.toml uv.lock ./
RUN uv sync --locked --no-dev --no-install-project

COPY . .
RUN uv sync --locked --no-dev

ENV PATH=${APP_DIR}/.venv/bin:${PATH} \
    SPARK_HOME=${APP_DIR}/.venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=${APP_DIR}/.venv/bin/python \
    PYSPARK_DRIVER_PYTHON=${APP_DIR}/.venv/bin/python \
    STREAMWARDEN_CONF_DIR=${APP_DIR}/conf \
    AIRFLOW_HOME=/opt/airflow \
    PYTHONUNBUFFERED=1

# An unprivileged user owns the directories the named volumes are mounted on (a new volume takes
# the ownership of the directory it is mounted over).
RUN useradd --uid 50000 --create-home --shell /usr/sbin/nologin streamwarden \
    && mkdir -p ${APP_DIR}/.runtime /opt/airflow/logs /opt/airflow/auth /data /tmp/spark-work \
    && chown -R streamwarden ${APP_DIR}/.runtime /opt/airflow /data /tmp/spark-work
USER streamwarden
