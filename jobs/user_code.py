"""A team's own job: its PySpark function (`kind: python`) or its Spark SQL query (`kind: sql`),
run by the platform like a built-in kind's transform.

The contract, for the function the job file's `entrypoint` names (`package.module:function`,
imported from the job's `code` directory):

    def build(inputs: Mapping[str, DataFrame], context: JobContext) -> DataFrame

- `inputs`: each of `pipeline.sources` by name, as a stream (a batch in a backfill or a batch
  run) of its valid events: the declared fields, typed, plus `event_date` and `event_hour` from
  the source's event time (UTC). A line that does not parse is not in it: the platform writes it
  to the sink itself, as a dead letter (below), as it does for every kind.
- `context`: the job's name, its `parameters` (read-only), the SparkSession, and
  `context.model(name)`: the bytes of the model version the job file pins under that name
  (`pipeline.models`, read from the platform's model store, `ops.models`).
- It returns the rows to sink, holding every column of `partition_columns` (and, for a job with
  a `view`, its key and value columns: the sink is then the view's changelog, `ops.views`). It
  may keep state (watermarks and windowed aggregations, `applyInPandasWithState`,
  `transformWithStateInPandas`); such a job says `operations.stateful: true`. It only builds the
  query: the analyzer calls it too, over empty inputs, to check the job before it runs.

A SQL job's query sees each source as a view under its name, holding the same valid events, with
the watermark the job file gives it (`watermarks`, minutes behind the newest event time).

The dead letters join the team's rows in the sink: `dead_letter_reason` and `raw` (null on
the team's rows), the event date and hour when the event time parsed, and `dead_letter` in
every other partition column of type string (null in the others).

The code reaches Spark's Python workers as a zip added to the session (`addPyFile`), so UDFs of
the team's modules run the same on the standalone cluster as in local mode. A module the code
imports that the platform's environment lacks, a missing function, a function that raises, a
query Spark refuses or rows without a partition column are errors of the job's config, naming
the field: `warden validate` reports them, and a driver exits with them before its query starts.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from jobs.parsing import RAW, with_event_partitions
from ops.exceptions import ModelStoreError
from ops.spec.code import code_digest, code_files
from ops.spec.pipelines import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_ROUTE,
    EVENT_DATE,
    EVENT_HOUR,
    ModelRef,
    PythonPipeline,
    SqlPipeline,
    TeamPipeline,
)
from ops.spec.platform import PlatformConfig

ENTRYPOINT_FIELD = "pipeline.entrypoint"
QUERY_FIELD = "pipeline.query"
PARTITIONS_FIELD = "pipeline.partition_columns"
MODELS_FIELD = "pipeline.models"
VIEW_FIELD = "pipeline.view"


# Reads a model version from the platform's model store (`ops.models.fetch_model`).
ModelSource = Callable[[ModelRef], bytes]


@dataclass(frozen=True)
class JobContext:
    """What the team's function is given besides its inputs."""

    job: str
    parameters: Mapping[str, Any]
    spark: SparkSession
    models: Mapping[str, ModelRef] = field(default_factory=lambda: MappingProxyType({}))
    model_source: ModelSource | None = None

    def model(self, name: str) -> bytes:
        """The bytes of the model version the job file pins under `name` (`pipeline.models`),
        read from the platform's model store; a name the job file does not pin, or a version the
        store does not hold, is an error of that field."""
        ref = self.models.get(name)
        if ref is None:
            raise UserCodeError(
                MODELS_FIELD, f"the code asks for model {name!r}, which pipeline.models does not name"
            )
        if self.model_source is None:
            raise UserCodeError(f"{MODELS_FIELD}.{name}", "no model store is given to this run of the job")
        try:
            return self.model_source(ref)
        except ModelStoreError as error:
            raise UserCodeError(f"{MODELS_FIELD}.{name}", str(error)) from error


class UserCodeError(Exception):
    """The team's code cannot give the job's rows; `field` is the job file's field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


Build = Callable[[Mapping[str, DataFrame], JobContext], DataFrame]

# The code directories this process has imported a team's modules from (a driver: one; a test
# session or the analyzer: several).
_CODE_DIRS: set[Path] = set()


def load_entrypoint(pipeline: PythonPipeline) -> Build:
    """The function `entrypoint` names, freshly imported from the code directory: every module
    imported before from a team's code directory (an older version of this code, or another job's
    package of the same name) is imported again; the platform's own modules never are. A job
    without `code` ships with the platform: its entrypoint is imported as any module is."""
    module_name, function_name = pipeline.entrypoint.split(":")
    if pipeline.code is not None:
        _import_freshly(Path(pipeline.code))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        if missing.name is not None and (module_name + ".").startswith(missing.name + "."):
            where = (
                "the platform's packages" if pipeline.code is None else f"the code directory {pipeline.code}"
            )
            raise UserCodeError(ENTRYPOINT_FIELD, f"module {module_name!r} is not in {where}") from None
        raise UserCodeError(
            ENTRYPOINT_FIELD,
            f"{module_name} imports {missing.name!r}, which the platform's Python environment does not "
            "have: add it to the platform's dependencies",
        ) from missing
    except Exception as error:  # whatever the module raises on import is the job's error
        raise UserCodeError(
            ENTRYPOINT_FIELD, f"importing {module_name} raised {described_error(error, pipeline.code)}"
        ) from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UserCodeError(ENTRYPOINT_FIELD, f"{module_name} has no function {function_name!r}")
    return function  # type: ignore[no-any-return]


def _import_freshly(code: Path) -> None:
    """Forget the modules imported from any team's code directory and put `code` first on the path."""
    _CODE_DIRS.add(code)
    for name, module in list(sys.modules.items()):
        # A namespace package (no __init__.py) has no file, only its directories.
        locations = [getattr(module, "__file__", None), *(getattr(module, "__path__", None) or ())]
        if any(
            Path(location).is_relative_to(loaded)
            for location in locations
            if location
            for loaded in _CODE_DIRS
        ):
            del sys.modules[name]
    # First on the path: the package may have been imported before from another directory.
    if str(code) in sys.path:
        sys.path.remove(str(code))
    sys.path.insert(0, str(code))
    importlib.invalidate_caches()


def sql_logic(pipeline: SqlPipeline) -> Build:
    """The query as a job's logic: each input a view under its name, watermarked where the job
    file says, and the query over them."""

    def build(inputs: Mapping[str, DataFrame], context: JobContext) -> DataFrame:
        for name, frame in inputs.items():
            minutes = pipeline.watermarks.get(name)
            if minutes is not None:
                frame = frame.withWatermark(
                    pipeline.sources[name].event_time_field, f"{minutes * 60:g} seconds"
                )
            frame.createOrReplaceTempView(name)
        return context.spark.sql(pipeline.query)

    return build


@dataclass(frozen=True)
class _Logic:
    """A team job's logic, and how its errors are told: the job file's field and its name."""

    build: Build
    config_field: str
    name: str
    code: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    models: Mapping[str, ModelRef] = field(default_factory=lambda: MappingProxyType({}))


def _logic(pipeline: TeamPipeline, spark: SparkSession) -> _Logic:
    if isinstance(pipeline, PythonPipeline):
        build = load_entrypoint(pipeline)
        if pipeline.code is not None:
            _ship_code(spark, Path(pipeline.code))
        return _Logic(
            build,
            ENTRYPOINT_FIELD,
            pipeline.entrypoint,
            pipeline.code,
            MappingProxyType(dict(pipeline.parameters)),
            MappingProxyType(dict(pipeline.models)),
        )
    assert isinstance(pipeline, SqlPipeline)
    return _Logic(sql_logic(pipeline), QUERY_FIELD, "the query")


def user_rows(
    inputs: Mapping[str, DataFrame], pipeline: TeamPipeline, job: str, models: ModelSource | None = None
) -> DataFrame:
    """The sink's rows: the team's logic (its function, or its query) over the valid events, with
    the dead letters. `models` reads the versions `pipeline.models` pins (a job that pins none
    needs none)."""
    spark = next(iter(inputs.values())).sparkSession
    logic = _logic(pipeline, spark)
    valid = {
        name: inputs[name]
        .where(F.col(DEAD_LETTER_REASON).isNull())
        .drop(DEAD_LETTER_REASON, RAW)
        .transform(with_event_partitions, source)
        for name, source in pipeline.sources.items()
    }
    context = JobContext(job, logic.parameters, spark, logic.models, models)
    try:
        rows = logic.build(valid, context)
    except UserCodeError:
        raise
    except Exception as error:  # whatever the team's logic raises is the job's error
        raise UserCodeError(
            logic.config_field, f"{logic.name} raised {described_error(error, logic.code)}"
        ) from error
    if not isinstance(rows, DataFrame):
        raise UserCodeError(
            logic.config_field, f"{logic.name} returned {type(rows).__name__}, not a DataFrame"
        )
    missing = [column for column in pipeline.partition_columns if column not in rows.columns]
    if missing:
        raise UserCodeError(
            PARTITIONS_FIELD,
            f"the rows {logic.name} returns lack the partition columns {missing} (they have {rows.columns})",
        )
    if pipeline.view is not None:
        lacking = [
            column for column in (pipeline.view.key, pipeline.view.value) if column not in rows.columns
        ]
        if lacking:
            raise UserCodeError(
                VIEW_FIELD,
                f"the rows {logic.name} returns lack the view's columns {lacking} (they have {rows.columns})",
            )
    return rows.unionByName(_dead_letters(inputs, pipeline, rows), allowMissingColumns=True)


def _dead_letters(inputs: Mapping[str, DataFrame], pipeline: TeamPipeline, rows: DataFrame) -> DataFrame:
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


def _ship_code(spark: SparkSession, code: Path) -> None:
    """Add the code directory to the session as a zip named by its digest, for the Python
    workers (a changed code directory is a new zip: Spark refuses a name it has seen)."""
    archive = Path(tempfile.gettempdir()) / "streamwarden-code" / f"{code.name}-{code_digest(code)[:16]}.zip"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w") as bundle:
            for path in code_files(code):
                bundle.write(path, path.relative_to(code).as_posix())
        partial.replace(archive)
    spark.sparkContext.addPyFile(str(archive))


def store_models(platform: PlatformConfig) -> ModelSource:
    """The platform's model store as the source of a job's pinned models."""

    def fetch(ref: ModelRef) -> bytes:
        # Imported here: the store's S3 client (boto3) loads only in a driver whose job pins a model.
        from ops.models import fetch_model

        return fetch_model(platform, ref.name, ref.version)

    return fetch


def described_error(error: BaseException, code: str | None) -> str:
    """An exception as its class and message and, when it came from the team's code directory,
    the innermost line of it there."""
    where = ""
    traceback = error.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if code is not None and Path(filename).is_relative_to(code):
            where = f" at {Path(filename).relative_to(code)}:{traceback.tb_lineno}"
        traceback = traceback.tb_next
    return f"{type(error).__name__}: {error}{where}"
