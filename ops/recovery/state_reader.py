"""A stateful job's committed state, read through Spark's state data source (`warden state`).

Spark can read a query's state store offline, from the checkpoint alone:
`spark.read.format("state-metadata")` lists the stateful operators (with, for transformWithState,
its state variables), and `spark.read.format("statestore")` returns one row per key of one
operator's state as of a committed batch (`key` and `value` structs). A transformWithState state
variable is chosen with the `stateVarName` option. Two things the reader must match:

* the checkpoint format version: with format 2 the state files are named by ids recorded in the
  commit log, and the reader finds them only with
  `spark.sql.streaming.stateStore.checkpointFormatVersion` set as the writer had it (docs/architecture.md §7);
* the batch: the newest entry of `commits/` is the newest state a reader can trust, so that is
  the batch read (never a batch still running).

Reading needs no running query and changes nothing; a job's own driver may run meanwhile.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ops.driver.checkpoint import log_entries
from ops.exceptions import StateReadError
from ops.spec.job import JobSpec
from ops.spec.platform import PlatformConfig

CHECKPOINT_FORMAT_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
VALUE_STATE = "ValueState"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class StateTable:
    """One value-state variable of a job, one row per key, as of a committed batch."""

    job: str
    state_var: str
    batch_id: int
    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    # Key fields then value fields; timestamps as aware UTC datetimes. Sorted by key.
    rows: tuple[tuple[object, ...], ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.key_columns + self.value_columns

    def as_json(self) -> dict[str, Any]:
        """The table as JSON values, timestamps in ISO 8601: what `warden state --json` prints and
        the job board's state lookup reads (ops.console.state_lookup)."""
        return {
            "job": self.job,
            "state_var": self.state_var,
            "batch_id": self.batch_id,
            "key_columns": list(self.key_columns),
            "value_columns": list(self.value_columns),
            "rows": [
                [cell.isoformat() if isinstance(cell, datetime) else cell for cell in row]
                for row in self.rows
            ],
        }


def last_committed_batch(checkpoint: Path) -> int | None:
    """The newest batch id in the checkpoint's commit log, or None before the first commit."""
    return max(log_entries(checkpoint / "commits"), default=None)


def local_session(platform: PlatformConfig) -> SparkSession:
    """The active SparkSession, or a small local one for reading state (UTC, no UI), bound to the
    platform's driver address like the drivers."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.update(platform.spark.network_env())
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("streamwarden-state-reader")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in platform.spark.network_conf().items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set one SQL conf for the duration of the block, then put back what was there."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def read_value_state(
    spark: SparkSession, platform: PlatformConfig, spec: JobSpec, key: str | None = None
) -> StateTable:
    """The job's transformWithState value state as of its last committed batch.

    `key`, when given, keeps the rows whose first key column (for device_health: `device_id`)
    equals it. Raises `StateReadError` for a job that is not stateful, has no committed batch yet,
    or keeps no single value-state variable.
    """
    if not spec.operations.stateful:
        raise StateReadError(f"job {spec.name!r} is not stateful: it keeps no state to read")
    checkpoint = platform.checkpoint_root / spec.name
    batch_id = last_committed_batch(checkpoint)
    if batch_id is None:
        raise StateReadError(f"job {spec.name!r} has no committed batch yet (no commits in {checkpoint})")
    with _session_conf(spark, CHECKPOINT_FORMAT_CONF, str(spec.operations.checkpoint_format)):
        operator_id, state_var = _value_state_variable(spark, spec.name, checkpoint)
        state = (
            spark.read.format("statestore")
            .option("batchId", batch_id)
            .option("operatorId", operator_id)
            .option("stateVarName", state_var)
            .load(str(checkpoint))
        )
        key_fields = _struct_fields(state.schema, "key")
        value_fields = _struct_fields(state.schema, "value")
        if key is not None:
            state = state.where(F.col(f"key.{key_fields[0].name}").cast("string") == key)
        selected = state.select(
            *(_plain(f"key.{field.name}", field).alias(field.name) for field in key_fields),
            *(_plain(f"value.{field.name}", field).alias(field.name) for field in value_fields),
        ).orderBy(*(field.name for field in key_fields))
        collected = selected.collect()
    timestamps = {
        i for i, field in enumerate(key_fields + value_fields) if isinstance(field.dataType, T.TimestampType)
    }
    rows = tuple(
        tuple(_instant(cell) if i in timestamps and cell is not None else cell for i, cell in enumerate(row))
        for row in collected
    )
    return StateTable(
        job=spec.name,
        state_var=state_var,
        batch_id=batch_id,
        key_columns=tuple(field.name for field in key_fields),
        value_columns=tuple(field.name for field in value_fields),
        rows=rows,
    )


def _value_state_variable(spark: SparkSession, job: str, checkpoint: Path) -> tuple[int, str]:
    """(operator id, state variable name) of the job's one transformWithState value state."""
    operators = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    found: list[tuple[int, str]] = []
    for operator in operators:
        properties = json.loads(operator["operatorProperties"] or "{}")
        for variable in properties.get("stateVariables", []):
            if variable.get("stateVariableType") == VALUE_STATE:
                found.append((int(operator["operatorId"]), variable["stateName"]))
    if len(found) != 1:
        names = sorted({str(operator["operatorName"]) for operator in operators})
        raise StateReadError(
            f"job {job!r} keeps {len(found)} transformWithState value states "
            f"({', '.join(name for _, name in found) or 'none'}; operators: {', '.join(names) or 'none'}); "
            "`warden state` shows a job with exactly one"
        )
    return found[0]


def _struct_fields(schema: T.StructType, name: str) -> list[T.StructField]:
    data_type = schema[name].dataType
    assert isinstance(data_type, T.StructType), f"state column {name!r} is {data_type.simpleString()}"
    return list(data_type.fields)


def _plain(path: str, field: T.StructField) -> Column:
    # Timestamps leave Spark as epoch microseconds: collected timestamps would be in local time.
    if isinstance(field.dataType, T.TimestampType):
        return F.unix_micros(F.col(path))
    return F.col(path)


def _instant(micros: object) -> datetime:
    assert isinstance(micros, int)
    return _EPOCH + timedelta(microseconds=micros)
