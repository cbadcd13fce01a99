"""Script UDFs in a SQL job and a router, in-process: the stream runs the version it decided per
batch and the batch runner the file as it is, with the same rows; a UDF file that does not load,
a type Spark does not know or a missing file is named by its field before anything runs."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.analysis import analyse
from jobs.batch import batch_rows
from ops.driver.checkpoint import query_id
from ops.driver.udf_versions import decided_batches, read_decision, version_of
from ops.exceptions import ConfigError
from ops.spec.job import find_job
from ops.spec.paths import JobPaths
from ops.spec.platform import PlatformConfig
from synthetic.scenarios import impressions_plays_scenario
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now
from tests.support.team_jobs import SQL_JOB, sql_job_spec, write_team_job

SHELF_MODULE = (
    "def shelf(position):\n    return (position // 10).astype('Int64').astype(str).radd('shelf-')\n"
)
SHELVES_QUERY = """
SELECT impression_id, profile_id, shelf(row_position) AS shelf, 'seen' AS outcome, event_date, event_hour
FROM impressions
"""


def sql_job_with_udf(platform: PlatformConfig, source: str, returns: str = "string") -> None:
    udf_file = platform.conf_dir / "jobs" / "udfs" / "shelf.py"
    udf_file.parent.mkdir(exist_ok=True)
    udf_file.write_text(source)
    spec = sql_job_spec(SHELVES_QUERY)
    spec["pipeline"]["udfs"] = [
        {"name": "shelf", "file": "udfs/shelf.py", "function": "shelf", "returns": returns}
    ]
    write_team_job(platform, spec)


@pytest.mark.spark
def test_a_sql_job_calls_its_script_udf_per_batch_in_the_stream_and_as_the_file_is_in_a_batch_run(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    sql_job_with_udf(platform_conf, SHELF_MODULE)
    impressions_plays_scenario(platform_conf.landing_root, 300, seed=5)
    spec = find_job(SQL_JOB, platform_conf.conf_dir)

    run_available_now(spark, platform_conf, spec)

    streamed = spark.read.parquet(str(platform_conf.lake_root / SQL_JOB))
    batch = batch_rows(spark, platform_conf, spec, platform_conf.landing_root)
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
    shelves = {row["shelf"] for row in streamed.where("outcome = 'seen'").collect()}
    assert "shelf-0" in shelves and None not in shelves
    paths = JobPaths.of(platform_conf, spec)
    query = query_id(paths.checkpoint)
    assert query is not None
    decisions = [
        read_decision(paths.udf_versions, query, b) for b in decided_batches(paths.udf_versions, query)
    ]
    assert decisions and {d.versions["shelf"] for d in decisions if d} == {version_of(SHELF_MODULE.encode())}


def with_udf_filter(file: str, returns: str = "boolean") -> Any:
    def edit(spec: dict[str, Any]) -> None:
        spec["pipeline"]["udfs"] = [
            {"name": "flagged", "file": file, "function": "flagged", "returns": returns}
        ]
        spec["pipeline"]["routes"][0]["filter"] = "flagged(amount)"

    return edit


@pytest.mark.parametrize(
    ("source", "returns", "field", "message"),
    [
        ("def flagged(amount):\n    return amount >\n", "boolean", "pipeline.udfs.0.file", "SyntaxError"),
        (
            "def flag(amount):\n    return amount > 1\n",
            "boolean",
            "pipeline.udfs.0.file",
            "no function 'flagged'",
        ),
        (
            "def flagged(amount):\n    return amount > 1\n",
            "bool ean",
            "pipeline.udfs.0.returns",
            "is not a Spark type",
        ),
    ],
    ids=["syntax", "function", "returns"],
)
def test_the_analyzer_names_a_script_udf_that_does_not_load(
    spark: SparkSession, platform_conf: PlatformConfig, source: str, returns: str, field: str, message: str
) -> None:
    udf_file = platform_conf.conf_dir / "jobs" / "flag.py"
    udf_file.write_text(source)
    edit_job(platform_conf, "router", with_udf_filter("flag.py", returns))

    problems = analyse(spark, platform_conf, find_job("router", platform_conf.conf_dir))

    assert list(problems) == [field]
    assert message in problems[field]


def test_a_missing_udf_file_is_a_config_error(platform_conf: PlatformConfig) -> None:
    edit_job(platform_conf, "router", with_udf_filter("udfs/nowhere.py"))

    with pytest.raises(ConfigError, match=r"field 'pipeline.udfs.0.file': .*udfs/nowhere.py is not a file"):
        find_job("router", platform_conf.conf_dir)


def test_a_job_file_may_not_name_a_udf_twice(platform_conf: PlatformConfig) -> None:
    (platform_conf.conf_dir / "jobs" / "flag.py").write_text("def flagged(amount):\n    return amount > 1\n")

    def twice(spec: dict[str, Any]) -> None:
        with_udf_filter("flag.py")(spec)
        spec["pipeline"]["udfs"] *= 2

    edit_job(platform_conf, "router", twice)
    with pytest.raises(ConfigError, match="udf names must be unique"):
        find_job("router", platform_conf.conf_dir)


def test_udf_files_are_named_absolutely_and_left_out_of_the_config_version(
    platform_conf: PlatformConfig,
) -> None:
    udf_file = platform_conf.conf_dir / "jobs" / "flag.py"
    udf_file.write_text("def flagged(amount):\n    return amount > 1\n")
    edit_job(platform_conf, "router", with_udf_filter("flag.py"))
    before = find_job("router", platform_conf.conf_dir)

    udf_file.write_text("def flagged(amount):\n    return amount > 2\n")
    after = find_job("router", platform_conf.conf_dir)

    assert before.pipeline.udfs[0].file == str(udf_file)  # type: ignore[union-attr]
    assert before.config_version == after.config_version
