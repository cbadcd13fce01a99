"""`python -m jobs.analysis [JOB ...]`: Spark's analyzer on job files, the way a driver runs it.

For each job (all valid job files when none is named) it builds empty frames with the declared
schema of every input, parses them like the driver does and runs the driver's own checks over
them: `jobs.catalog.expression_problems` (route filters, attack_chains rule filters,
device_health `red_when`) and the preview stages (`jobs.preview.stage_problems`). Nothing is read,
and only a team's job has its query started, once, over empty streams (`stream_problems`), so one
local session analyses every job in seconds. Each verdict is written
to `<runtime_root>/jobs/<job>/analysis.json` for this version of the file (see
`ops.spec.analysis`, which reads them without Spark) and printed as one JSON line.

The enricher's mapping file is not analysed here: it is a separate file the driver reloads while
it runs and validates on every change.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyspark
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from jobs.catalog import expression_problems, parsed_inputs
from jobs.preview import stage_problems
from jobs.script_udfs import register_script_udfs
from jobs.user_code import ENTRYPOINT_FIELD, QUERY_FIELD, UserCodeError, store_models, user_rows
from ops.atomic import write_atomically
from ops.clock import utcnow
from ops.exceptions import ConfigError
from ops.spec.analysis import AnalysisVerdict, verdict_path
from ops.spec.job import JobSpec, load_jobs
from ops.spec.paths import JobPaths
from ops.spec.pipelines import ScriptUdfs, SqlPipeline, TeamPipeline
from ops.spec.platform import PlatformConfig, load_platform

# The raw landing lines a driver reads: one string column, as Spark's text source gives them.
RAW_SCHEMA = "value string"


def analysis_session(platform: PlatformConfig) -> SparkSession:
    """A small local session for the analyzer, with the platform's SQL settings (ANSI mode and the
    like change what the analyzer accepts), bound to loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("streamwarden-analysis")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    for key, value in platform.spark.extra_conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def analyse(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> dict[str, str]:
    """What a driver of `spec` would refuse before starting its query, by dotted field of the job
    file; empty when it would start. Only the analyzer runs, over empty frames (and, for a team's
    job, its query is started over empty streams: `stream_problems`), after the job's script UDFs
    are loaded and registered as a driver registers them."""
    if isinstance(spec.pipeline, ScriptUdfs):
        try:
            register_script_udfs(spark, spec.pipeline, JobPaths.of(platform, spec).udf_versions)
        except UserCodeError as error:
            return {error.field: str(error)}
    raw = {name: spark.createDataFrame([], RAW_SCHEMA) for name in spec.pipeline.inputs}
    problems = {**expression_problems(platform, spec, parsed_inputs(spec, raw)), **stage_problems(spec)}
    return problems or stream_problems(spark, platform, spec)


def stream_problems(spark: SparkSession, platform: PlatformConfig, spec: JobSpec) -> dict[str, str]:
    """What is wrong with a team job's logic (`jobs.user_code`: its code or query, the rows it
    returns) and what Spark's streaming engine refuses in it (an aggregation without a watermark
    in append mode, a join that would keep its state for ever): the logic run over empty streams
    of the job's sources and its query started, then stopped. The built-in kinds are checked by
    their own tests."""
    pipeline = spec.pipeline
    if not isinstance(pipeline, TeamPipeline):
        return {}
    with tempfile.TemporaryDirectory(prefix="streamwarden-analysis-") as scratch:
        empty = Path(scratch) / "input"
        empty.mkdir()
        raw = {name: spark.readStream.format("text").load(str(empty)) for name in pipeline.inputs}
        try:
            rows = user_rows(parsed_inputs(spec, raw), pipeline, spec.name, store_models(platform))
        except UserCodeError as error:
            return {error.field: str(error)}
        writer = rows.writeStream.format("noop").outputMode("append").trigger(availableNow=True)
        try:
            query = writer.option("checkpointLocation", str(Path(scratch) / "checkpoint")).start()
        except AnalysisException as refused:
            field = QUERY_FIELD if isinstance(pipeline, SqlPipeline) else ENTRYPOINT_FIELD
            return {field: f"Spark cannot run it as a stream: {refused}".splitlines()[0]}
        query.awaitTermination()
        query.stop()
    return {}


def record_verdict(platform: PlatformConfig, spec: JobSpec, problems: dict[str, str]) -> AnalysisVerdict:
    """Write the verdict on this version of the job file where `ops.spec.analysis` reads it."""
    verdict = AnalysisVerdict(
        job=spec.name,
        config_version=spec.config_version,
        spark_version=pyspark.__version__,
        analysed_at=utcnow(),
        problems=problems,
    )
    write_atomically(verdict_path(platform, spec.name), verdict.model_dump_json(indent=2))
    return verdict


def main(argv: Sequence[str] | None = None) -> int:
    """Analyse the named (or all valid) job files; exit 0 once every verdict is written, 2 when
    the platform config or a named job file does not load."""
    parser = argparse.ArgumentParser(prog="python -m jobs.analysis", description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="*", help="job names (default: every valid job file)")
    args = parser.parse_args(argv)
    try:
        platform = load_platform()
    except ConfigError as exc:
        print(f"jobs.analysis: {exc}", file=sys.stderr)
        return 2
    loaded = load_jobs(platform.conf_dir)
    names = args.jobs or sorted(loaded.specs)
    missing = [name for name in names if name not in loaded.specs]
    if missing:
        print(f"jobs.analysis: no valid job file for {', '.join(missing)}", file=sys.stderr)
        return 2
    spark = analysis_session(platform)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for name in names:
            spec = loaded.specs[name]
            verdict = record_verdict(platform, spec, analyse(spark, platform, spec))
            print(verdict.model_dump_json(), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
