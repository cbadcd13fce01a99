"""The Spark confs of the Hive metastore every Streamwarden Spark process shares.

Spark's embedded Derby metastore admits one process at a time, and the Hive 2.3 metastore service
in pyspark's jars cannot bind to loopback only, so each Spark process (compaction, backfill, a
reader) runs the metastore client in its own JVM against one PostgreSQL database: the embedded
server's `metastore` database, or `warehouse.metastore_jdbc_url` in a team deployment.

DataNucleus creates the metastore's tables on first use (`autoCreateTables`), but not their
foreign keys: creating a foreign key on a new table locks the table it references, which the
same process's open metastore transaction already holds, and the two connections deadlock
(seen here on the first `CREATE TABLE ... PARTITIONED BY`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ops.exceptions import ConfigError
from ops.secrets import lookup_secret
from ops.spec.platform import PlatformConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

METASTORE_DATABASE = "metastore"
# The embedded PostgreSQL server's superuser and host (ops.embedded.services), trusted on loopback.
EMBEDDED_HOST = "127.0.0.1"


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


def metastore_conf(platform: PlatformConfig) -> dict[str, str]:
    """The Spark confs (for a builder or `spark-submit --conf`) of a Hive catalog on the shared
    metastore, with the PostgreSQL JDBC driver on the driver's class path."""
    jar = platform.warehouse.jdbc_driver_jar
    if not jar.is_file():
        raise ConfigError(
            platform.conf_dir / "platform.yaml",
            f"field 'warehouse.jdbc_driver_jar': {jar} does not exist (install libpostgresql-jdbc-java: "
            "`make system-deps`)",
        )
    conf = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(platform.warehouse_root),
        "spark.driver.extraClassPath": str(jar),
        "spark.hadoop.javax.jdo.option.ConnectionURL": metastore_jdbc_url(platform),
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "spark.hadoop.javax.jdo.option.ConnectionUserName": platform.warehouse.metastore_user,
        "spark.hadoop.datanucleus.schema.autoCreateTables": "true",
        "spark.hadoop.datanucleus.schema.autoCreateColumns": "true",
        "spark.hadoop.datanucleus.schema.autoCreateConstraints": "false",
        "spark.hadoop.hive.metastore.schema.verification": "false",
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
