"""A job of the team's own PySpark code (`kind: python`): its function, found and called.

The contract, for the function the job file's `entrypoint` names (`package.module:function`,
imported from the job's `code` directory):

    def build(inputs: Mapping[str, DataFrame], context: JobContext) -> DataFrame

- `inputs`: each of `pipeline.sources` by name, as a stream (a batch in a backfill or a batch
  run) of its valid events: the declared fields, typed, plus `event_date` and `event_hour` from
  the source's event time (UTC). A line that does not parse is not in it: the platform writes it
  to the sink itself, as a dead letter (below), as it does for every kind.
- `context`: the job's name, its `parameters` (read-only) and the SparkSession.
- It returns the rows to sink, holding every column of `partition_columns`. It may keep state
  (watermarks and windowed aggregations, `applyInPandasWithState`, `transformWithStateInPandas`);
  such a job says `operations.stateful: true`. It only builds the query: the analyzer calls it
  too, over empty inputs, to check the job before it runs.

The dead letters join the function's rows in the sink: `dead_letter_reason` and `raw` (null on
the function's rows), the event date and hour when the event time parsed, and `dead_letter` in
every other partition column of type string (null in the others).

The code reaches Spark's Python workers as a zip added to the session (`addPyFile`), so UDFs of
the team's modules run the same on the standalone cluster as in local mode. A module the code
imports that the platform's environment lacks, a missing function, a function that raises or rows
without a partition column are errors of the job's config, naming the field: `warden validate`
reports them, and a driver exits with them before its query starts.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from jobs.parsing import DEAD_LETTER_REASON, RAW, with_event_partitions
from ops.spec.code import code_digest, code_files
from ops.spec.pipelines import DEAD_LETTER_ROUTE, EVENT_DATE, EVENT_HOUR, PythonPipeline

ENTRYPOINT_FIELD = "pipeline.entrypoint"
PARTITIONS_FIELD = "pipeline.partition_columns"


@dataclass(frozen=True)
class JobContext:
    """What the team's function is given besides its inputs."""

    job: str
    parameters: Mapping[str, Any]
    spark: SparkSession


class UserCodeError(Exception):
    """The team's code cannot give the job's rows; `field` is the job file's field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


Build = Callable[[Mapping[str, DataFrame], JobContext], DataFrame]


def load_entrypoint(pipeline: PythonPipeline) -> Build:
    """The function `entrypoint` names, freshly imported from the code directory: a module
    imported before from it (an older version of the code) or under the entrypoint's package name
    (from another job's code directory) is imported again."""
    module_name, function_name = pipeline.entrypoint.split(":")
    code = Path(pipeline.code)
    package = module_name.split(".")[0]
    for name, module in list(sys.modules.items()):
        location = getattr(module, "__file__", None)
        if name.split(".")[0] == package or (location is not None and Path(location).is_relative_to(code)):
            del sys.modules[name]
    if str(code) not in sys.path:
        sys.path.insert(0, str(code))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        if missing.name is not None and (module_name + ".").startswith(missing.name + "."):
            raise UserCodeError(
                ENTRYPOINT_FIELD, f"module {module_name!r} is not in the code directory {code}"
            ) from None
        raise UserCodeError(
            ENTRYPOINT_FIELD,
            f"{module_name} imports {missing.name!r}, which the platform's Python environment does not "
            "have: add it to the platform's dependencies",
        ) from missing
    except Exception as error:  # whatever the module raises on import is the job's error
        raise UserCodeError(
            ENTRYPOINT_FIELD, f"importing {module_name} raised {_described(error)}"
        ) from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UserCodeError(ENTRYPOINT_FIELD, f"{module_name} has no function {function_name!r}")
    return function  # type: ignore[no-any-return]


def user_rows(inputs: Mapping[str, DataFrame], pipeline: PythonPipeline, job: str) -> DataFrame:
    """The sink's rows: the team's function over the valid events, with the dead letters."""
    build = load_entrypoint(pipeline)
    spark = next(iter(inputs.values())).sparkSession
    _ship_code(spark, pipeline)
    valid = {
        name: inputs[name]
        .where(F.col(DEAD_LETTER_REASON).isNull())
        .drop(DEAD_LETTER_REASON, RAW)
        .transform(with_event_partitions, source)
        for name, source in pipeline.sources.items()
    }
    context = JobContext(job=job, parameters=MappingProxyType(dict(pipeline.parameters)), spark=spark)
    try:
        rows = build(valid, context)
    except Exception as error:  # whatever the function raises is the job's error
        raise UserCodeError(ENTRYPOINT_FIELD, f"{pipeline.entrypoint} raised {_described(error)}") from error
    if not isinstance(rows, DataFrame):
        raise UserCodeError(
            ENTRYPOINT_FIELD, f"{pipeline.entrypoint} returned {type(rows).__name__}, not a DataFrame"
        )
    missing = [column for column in pipeline.partition_columns if column not in rows.columns]
    if missing:
        raise UserCodeError(
            PARTITIONS_FIELD,
            f"the rows {pipeline.entrypoint} returns lack the partition columns {missing} "
            f"(they have {rows.columns})",
        )
    return rows.unionByName(_dead_letters(inputs, pipeline, rows), allowMissingColumns=True)


def _dead_letters(inputs: Mapping[str, DataFrame], pipeline: PythonPipeline, rows: DataFrame) -> DataFrame:
    """Every source's dead letters, with the partition columns of the team's rows."""
    types = {field.name: field.dataType for field in rows.schema.fields}
    own = [c for c in pipeline.partition_columns if c not in (EVENT_DATE, EVENT_HOUR)]
    frames = [
        inputs[name]
        .where(F.col(DEAD_LETTER_REASON).isNotNull())
        .transform(with_event_partitions, source)
        .select(
            DEAD_LETTER_REASON,
            RAW,
            *(
                (F.lit(DEAD_LETTER_ROUTE) if types[c] == StringType() else F.lit(None))
                .cast(types[c])
                .alias(c)
                for c in own
            ),
            *(F.col(c).cast(types[c]) for c in pipeline.partition_columns if c in (EVENT_DATE, EVENT_HOUR)),
        )
        for name, source in pipeline.sources.items()
    ]
    dead = frames[0]
    for frame in frames[1:]:
        dead = dead.unionByName(frame)
    return dead


def _ship_code(spark: SparkSession, pipeline: PythonPipeline) -> None:
    """Add the code directory to the session as a zip named by its digest, for the Python
    workers (a changed code directory is a new zip: Spark refuses a name it has seen)."""
    code = Path(pipeline.code)
    archive = Path(tempfile.gettempdir()) / "streamwarden-code" / f"{code.name}-{code_digest(code)[:16]}.zip"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w") as bundle:
            for path in code_files(code):
                bundle.write(path, path.relative_to(code).as_posix())
        partial.replace(archive)
    spark.sparkContext.addPyFile(str(archive))


def _described(error: BaseException) -> str:
    """An exception as its class, message and the innermost frame of the team's code."""
    frame = None
    traceback = error.__traceback__
    while traceback is not None:
        frame = traceback
        traceback = traceback.tb_next
    where = (
        f" at {Path(frame.tb_frame.f_code.co_filename).name}:{frame.tb_lineno}" if frame is not None else ""
    )
    return f"{type(error).__name__}: {error}{where}"
