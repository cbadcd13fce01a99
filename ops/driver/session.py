"""What every Spark application of the platform starts from: its log lines, its SparkSession and
its exit codes.

A streaming driver (`jobs.runtime`), the batch runner and the backfill (`jobs/`), the compaction
and the backfill's publish (`ops.warehouse`) each configure structlog once with
`configure_logging`, build the job's session with `build_session` and end with one of these
codes:

* 0 (`EXIT_STOPPED`): done, or, for a streaming query, stopped after its current batch.
* 1 (`EXIT_QUERY_FAILED`): a query died with an exception.
* 2 (`EXIT_CONFIG_ERROR`): the job's config could not be planned or read; nothing was started.
* 4 (`EXIT_JOB_BUSY`): a writer of the warehouse table found its lock held, or a recovery of the
  job stayed open.
"""

from __future__ import annotations

import os
import sys

import structlog
from pyspark.sql import SparkSession

from ops.spec.job import JobSpec
from ops.spec.platform import PlatformConfig

EXIT_STOPPED = 0
EXIT_QUERY_FAILED = 1
EXIT_CONFIG_ERROR = 2
EXIT_JOB_BUSY = 4

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def configure_logging(**context: str) -> None:
    """Configure structlog once for a driver process: JSON off a TTY, `context` bound to every line."""
    renderer = structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(**context)


def build_session(platform: PlatformConfig, spec: JobSpec, heap: str | None = None) -> SparkSession:
    """The job's SparkSession, configured from the platform defaults and the job's resources.

    `heap`, for a batch application (a backfill, the batch run): the memory its tasks run in
    instead of the job's (the driver's in local mode, each executor's on a cluster), committed when
    the JVM starts (`-Xms` as large as the heap). G1 otherwise grows a heap with what a run has
    allocated, so a long run's peak RSS grew past a short one's (a 30-hour backfill's 1.07-1.24x a
    10-hour one's); committed, it is the setting's whatever the range (`python -m
    benchmarks.backfill`).
    """
    # Python workers otherwise start the system python, which lacks the venv's packages
    # (docs/architecture.md §7).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The JVM starts in getOrCreate below and inherits this process's environment.
    os.environ.update(platform.spark.network_env())
    resources = spec.operations.resources
    if heap is not None:
        resources = resources.with_task_memory(platform.spark, heap)
    master, sizing = resources.spark_master(platform.spark)
    builder = (
        SparkSession.builder.appName(f"streamwarden-{spec.name}")
        .master(master)
        .config("spark.driver.memory", resources.driver_memory)
        .config("spark.sql.shuffle.partitions", str(resources.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", str(platform.spark.ui_enabled).lower())
        # Stage progress bars would interleave with the JSON log lines on stderr.
        .config("spark.ui.showConsoleProgress", "false")
    )
    conf = {**platform.spark.network_conf(), **sizing, **query_conf(platform, spec)}
    if heap is not None:
        options = (
            f"spark.{'driver' if resources.runs_locally(platform.spark) else 'executor'}.extraJavaOptions"
        )
        conf[options] = f"{conf.get(options, '')} -Xms{heap}".lstrip()
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def query_conf(platform: PlatformConfig, spec: JobSpec) -> dict[str, str]:
    """The job's state and listing confs with the platform's extra confs over them: the ones a
    query reads when it starts, so a test's running session can take them too."""
    return {**state_conf(spec), **listing_conf(spec), **platform.spark.extra_conf}


# More paths than this setting (Spark's default: 32) are listed by a distributed job.
PARALLEL_LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"
PARALLEL_LISTING_THRESHOLD = 32


def listing_conf(spec: JobSpec) -> dict[str, str]:
    """Keep the listing of a micro-batch's files in the driver.

    The file source builds each batch's DataFrame from its file paths and lists them again; above
    `spark.sql.sources.parallelPartitionDiscovery.threshold` paths (32) Spark runs a Spark job to do
    it. For a batch of 50 landing files that job cost 0.6 s of every micro-batch (`getBatch`, load
    average 10, `python -m benchmarks.batch_costs`) against 0.07 s listed in the driver.
    """
    max_files = spec.operations.trigger.max_files_per_trigger
    if max_files is None or max_files <= PARALLEL_LISTING_THRESHOLD:
        return {}
    return {PARALLEL_LISTING_CONF: str(max_files)}


def state_conf(spec: JobSpec) -> dict[str, str]:
    """SQL confs for a stateful job's state: RocksDB, and the spec's checkpoint format version.

    They are read when a query starts, so they can also be set on a running session (tests do).
    Readers of the state (`spark.read.format("statestore")`) need the same format version.
    """
    if not spec.operations.stateful:
        return {}
    return {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.checkpointFormatVersion": str(spec.operations.checkpoint_format),
    }
