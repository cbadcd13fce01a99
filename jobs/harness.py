"""A job over a few input lines, as a stream and as a batch, in a local Spark session: the helper a
team's own tests use (`warden new-job` writes a test that does).

    from jobs.harness import local_session, run_lines

    result = run_lines(local_session(), Path("conf/jobs/fraud.yaml"), {"events": lines}, tmp_path)
    assert sorted(result.streamed.collect(), key=str) == sorted(result.batch.collect(), key=str)

`run_lines` writes each source's lines as one landing file under `scratch`, runs the job's real
streaming query over them to their end (the driver's own plan: parse, dead letters, the job's
logic, its partitioned sink) and the batch runner over the same files, and returns both outputs
with the same columns. Where they differ, the job's result depends on batch boundaries or on
events behind its watermark.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from jobs.batch import batch_rows
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.driver.session import state_conf
from ops.exceptions import ConfigError
from ops.spec.job import load_job
from ops.spec.platform import PlatformConfig, SparkDefaults, StorageConfig


@dataclass(frozen=True)
class HarnessResult:
    """The job's sink after the stream, and the batch runner's rows, with the same columns."""

    streamed: DataFrame
    batch: DataFrame


def local_session() -> SparkSession:
    """A local session for a job's tests: two threads, no UI, UTC, on loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("streamwarden-harness")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )


def run_lines(
    spark: SparkSession, job_file: Path, lines: Mapping[str, Sequence[str]], scratch: Path
) -> HarnessResult:
    """The job of `job_file` over `lines` (source name -> its JSON lines), streamed and batched,
    with its landing zone, checkpoint and sink under `scratch`. ConfigError names a source the
    job does not have."""
    spec = load_job(job_file)
    unknown = sorted(set(lines) - set(spec.pipeline.inputs))
    if unknown:
        raise ConfigError(
            job_file, f"no source named {unknown} (the job reads {sorted(spec.pipeline.inputs)})"
        )
    platform = PlatformConfig(
        storage=StorageConfig(
            runtime_root=scratch / "runtime",
            landing_root=scratch / "landing",
            lake_root=scratch / "lake",
            checkpoint_root=scratch / "checkpoints",
        ),
        postgres=None,
        spark=SparkDefaults(master="local[2]", ui_enabled=False),
        conf_dir=job_file.resolve().parents[1],
    )
    for name, source in spec.pipeline.inputs.items():
        landing = platform.landing_root / source.path
        landing.mkdir(parents=True, exist_ok=True)
        (landing / f"{name}-0.json").write_text("".join(f"{line}\n" for line in lines.get(name, ())))
    for key, value in state_conf(spec).items():
        spark.conf.set(key, value)
    query = with_trigger(plan_job(platform, spec), spec, available_now=True)(spark).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{spec.name}: the stream failed: {query.exception()}")
    batch = batch_rows(spark, platform, spec, platform.landing_root)
    streamed = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path))
    return HarnessResult(streamed=streamed.select(*batch.columns), batch=batch)
