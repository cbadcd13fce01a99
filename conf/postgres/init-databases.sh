#!/bin/sh
# The team stack's databases on one PostgreSQL server, each owned by a role of its own: `airflow`
# (Airflow's metadata), `ledger` (Streamwarden's ledger), `metastore` (the Hive metastore
# database every Spark process shares) and `views` (the key-value views jobs publish). The
# postgres image runs this once, on an empty data directory; on AWS an operator runs it once
# against the RDS instance as its master user (terraform/README.md). The passwords come from .env through docker-compose.yml (on AWS, from
# their Secrets Manager secrets). psql's :'name' quoting keeps a password with quotes in it a
# literal.
set -eu
psql --no-psqlrc -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "${POSTGRES_DB:-postgres}" \
  -v airflow_password="$AIRFLOW_DB_PASSWORD" \
  -v ledger_password="$LEDGER_DB_PASSWORD" \
  -v metastore_password="$METASTORE_DB_PASSWORD" \
  -v views_password="$VIEWS_DB_PASSWORD" <<'SQL'
-- A managed server's master role (RDS: CREATEROLE and CREATEDB, no superuser) must be able to SET
-- ROLE the owner of a database it creates (PostgreSQL 16+); this makes it so for the roles below.
SET createrole_self_grant = 'set';
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE ledger LOGIN PASSWORD :'ledger_password';
CREATE DATABASE ledger OWNER ledger;
CREATE ROLE metastore LOGIN PASSWORD :'metastore_password';
CREATE DATABASE metastore OWNER metastore;
CREATE ROLE views LOGIN PASSWORD :'views_password';
CREATE DATABASE views OWNER views;
-- Nobody else may connect to them (PUBLIC may connect to a new database by default).
REVOKE ALL ON DATABASE airflow, ledger, metastore, views FROM PUBLIC;
SQL
