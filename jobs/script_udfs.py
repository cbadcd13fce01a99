"""Script UDFs: the vectorized Python functions a router's filters or a SQL job's query call by
name (`udfs:` in the job file, `ops.spec.pipelines.ScriptUdf`), from files that may change while
the job runs, without a restart.

A UDF file holds plain Python; `function` is called with a pandas Series per argument and returns
a Series of the declared type:

    def risk(amount: pd.Series, country: pd.Series) -> pd.Series:
        return (amount > 100) & (country != "NL")

When the query is planned, every file must load (an error names the job file's field, and the
driver does not start). After that, the first task of each micro-batch reads the files again
and decides the versions the whole batch runs (`ops.driver.udf_versions`): a changed file that
loads is the new version from that batch on; one that does not is refused, and the batch keeps
the version before it. Python workers load each version once. A batch run (no micro-batch) runs
the files as they are.

The files are read where the tasks run: on a cluster, the job's runtime directory and the UDF
files must be on a file system every worker mounts.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import DataType

from jobs.user_code import UserCodeError, described_error
from ops.driver.udf_versions import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    Refusal,
    UdfDecision,
    keep_version,
    previous_decision,
    read_decision,
    record_decision,
    version_file,
    version_of,
)
from ops.spec.pipelines import ScriptUdfs

UdfFunction = Callable[..., pd.Series]


@dataclass(frozen=True)
class _Udf:
    """One UDF as a Python worker needs it."""

    name: str
    file: str
    function: str


@dataclass(frozen=True)
class _JobUdfs:
    """Every UDF of one job, the store of its versions and the versions the plan installed."""

    store: str
    udfs: tuple[_Udf, ...]
    installed: dict[str, str]


def register_script_udfs(spark: SparkSession, pipeline: ScriptUdfs, store: Path) -> None:
    """Register the pipeline's UDFs in the session under their names, each file loaded and kept
    in `store` as the version installed; raises `UserCodeError` naming the field at fault."""
    installed: dict[str, str] = {}
    returns: dict[str, DataType] = {}
    for index, udf in enumerate(pipeline.udfs):
        source = Path(udf.file).read_bytes()
        plain = _Udf(udf.name, udf.file, udf.function)
        try:
            _load(plain, source)
        except Exception as error:  # whatever the file raises is the job's error
            raise UserCodeError(
                f"pipeline.udfs.{index}.file", f"{udf.file} does not load: {_described(plain, error)}"
            ) from error
        try:
            returns[udf.name] = DataType.fromDDL(udf.returns)
        except Exception as error:  # Spark's parser says why in its own exception
            raise UserCodeError(
                f"pipeline.udfs.{index}.returns", f"{udf.returns!r} is not a Spark type: {error}"
            ) from error
        installed[udf.name] = keep_version(store, udf.name, source)
    job_udfs = _JobUdfs(str(store), tuple(_Udf(u.name, u.file, u.function) for u in pipeline.udfs), installed)
    for udf in pipeline.udfs:
        spark.udf.register(udf.name, pandas_udf(_caller(job_udfs, udf.name), returns[udf.name]))  # type: ignore[call-overload]


def _caller(job_udfs: _JobUdfs, name: str) -> UdfFunction:
    """The function Spark ships to its Python workers: the batch's version of UDF `name`."""

    def call(*columns: pd.Series) -> pd.Series:
        return _function(job_udfs, name)(*columns)

    return call


# Per Python worker: each version loaded once, and the decision of the batch it runs now, per
# job and query.
_LOADED: dict[tuple[str, str, str], UdfFunction] = {}
_DECIDED: dict[tuple[str, str], UdfDecision] = {}


def _function(job_udfs: _JobUdfs, name: str) -> UdfFunction:
    udf = next(u for u in job_udfs.udfs if u.name == name)
    context = TaskContext.get()
    query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
    batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
    if query is None or batch is None:
        source = Path(udf.file).read_bytes()
        return _loaded(job_udfs, udf, version_of(source), source)
    key, batch_id = (job_udfs.store, query), int(batch)
    decided = _DECIDED.get(key)
    if decided is None or decided.batch_id != batch_id:
        store = Path(job_udfs.store)
        decided = _DECIDED[key] = read_decision(store, query, batch_id) or _decide(job_udfs, query, batch_id)
    version = decided.versions[name]
    return _loaded(job_udfs, udf, version, version_file(Path(job_udfs.store), name, version).read_bytes())


def _loaded(job_udfs: _JobUdfs, udf: _Udf, version: str, source: bytes) -> UdfFunction:
    key = (job_udfs.store, udf.name, version)
    if key not in _LOADED:
        _LOADED[key] = _load(udf, source)
    return _LOADED[key]


def _decide(job_udfs: _JobUdfs, query: str, batch: int) -> UdfDecision:
    """The versions batch `batch` runs: each file as it is now if it loads, else the version the
    batch before ran; recorded unless another task of the batch recorded its decision first."""
    store = Path(job_udfs.store)
    previous = previous_decision(store, query, batch)
    before = previous.versions if previous else job_udfs.installed
    refused_before = previous.refused if previous else {}
    versions: dict[str, str] = {}
    refused: dict[str, Refusal] = {}
    for udf in job_udfs.udfs:
        versions[udf.name] = before[udf.name]
        try:
            source = Path(udf.file).read_bytes()
        except OSError as error:
            refused[udf.name] = Refusal("unreadable", str(error))
            continue
        version = version_of(source)
        known = refused_before.get(udf.name)
        if version == before[udf.name]:
            continue
        if known is not None and known.version == version:
            refused[udf.name] = known
            continue
        try:
            _load(udf, source)
        except Exception as error:  # whatever the new version raises refuses it
            refused[udf.name] = Refusal(version, _described(udf, error))
            continue
        versions[udf.name] = keep_version(store, udf.name, source)
    return record_decision(store, query, UdfDecision(batch, versions, refused))


def _load(udf: _Udf, source: bytes) -> UdfFunction:
    """The UDF's function from one version of its file, run as a module of its own whose
    tracebacks name the file."""
    module = types.ModuleType(f"streamwarden_udf_{udf.name}")
    module.__file__ = udf.file
    exec(compile(source, udf.file, "exec"), module.__dict__)  # noqa: S102 - the team's UDF file is the job's code
    function = module.__dict__.get(udf.function)
    if not callable(function):
        raise AttributeError(f"{Path(udf.file).name} has no function {udf.function!r}")
    return function  # type: ignore[no-any-return]


def _described(udf: _Udf, error: BaseException) -> str:
    return described_error(error, str(Path(udf.file).parent))
