"""An upgrade's output check in its dry-run driver: the candidate's rows against the running
version's over the same input (`operations.upgrade.output_check`).

Both versions' transforms run in batch over the files the newest batch of the upgrade's savepoint
read (`ops.driver.output_shift.newest_batch_input`), in the dry run's own session, and the
checked column's values of the rows that are not dead letters are compared. The verdict is
written where `ops.recovery.upgrade.dry_run_verdict` reads it, before the driver exits; nothing
of the comparison is written to a sink.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.catalog import sink_rows
from ops.atomic import write_atomically
from ops.driver.output_shift import OutputShift, ks_statistic, newest_batch_input
from ops.exceptions import ConfigError
from ops.spec.job import JobSpec, job_file, load_job
from ops.spec.paths import JobPaths
from ops.spec.pipelines import DEAD_LETTER_REASON
from ops.spec.platform import PlatformConfig

log = structlog.get_logger("streamwarden.output_shift")
# Missing input files a verdict names (the count is in its message).
MISSING_NAMED = 10


def compare_with_running(
    spark: SparkSession, platform: PlatformConfig, candidate: JobSpec, paths: JobPaths
) -> OutputShift:
    """Compare the candidate's checked column with the running version's (`paths.running_spec`)
    over the savepoint's newest input, and write the verdict to `paths.output_shift`."""
    check = candidate.operations.upgrade.output_check
    assert check is not None
    running = load_job(paths.running_spec, platform.conf_dir / "jobs")
    newest = newest_batch_input(paths)
    if newest is None:
        shift = OutputShift(column=check.column, max_shift=check.max_shift, batch_id=None)
    else:
        batch_id, files = newest
        missing = sorted(str(path) for read in files.values() for path in read if not path.is_file())
        if missing:
            shift = OutputShift(
                column=check.column,
                max_shift=check.max_shift,
                batch_id=batch_id,
                missing_inputs=tuple(missing[:MISSING_NAMED]),
            )
        else:
            before = _column_values(spark, platform, running, files, check.column)
            after = _column_values(spark, platform, candidate, files, check.column)
            shift = OutputShift(
                column=check.column,
                max_shift=check.max_shift,
                batch_id=batch_id,
                running_rows=before.size,
                candidate_rows=after.size,
                shift=ks_statistic(before, after),
                running_mean=float(before.mean()) if before.size else None,
                candidate_mean=float(after.mean()) if after.size else None,
            )
    write_atomically(paths.output_shift, shift.model_dump_json(indent=2).encode())
    log.info("output compared", **shift.model_dump(exclude={"missing_inputs"}))
    return shift


def _column_values(
    spark: SparkSession, platform: PlatformConfig, spec: JobSpec, files: dict[str, list[Path]], column: str
) -> np.ndarray:
    """`column` of the rows `spec` computes from `files` (by input name), dead letters and nulls left out."""
    raw = {name: _read(spark, files.get(name, [])) for name in spec.pipeline.inputs}
    rows = sink_rows(platform, spec, raw)
    if column not in rows.columns:
        raise ConfigError(
            job_file(spec.name, platform.conf_dir),
            f"field 'operations.upgrade.output_check.column': {column!r} is not a column of the rows "
            f"(they have {rows.columns})",
        )
    kept = rows.where(F.col(DEAD_LETTER_REASON).isNull() & F.col(column).isNotNull())
    return np.array([row[0] for row in kept.select(F.col(column).cast("double")).collect()], dtype=np.float64)


def _read(spark: SparkSession, paths: list[Path]) -> DataFrame:
    if not paths:
        return spark.createDataFrame([], "value string")
    return spark.read.format("text").load([str(path) for path in paths])
