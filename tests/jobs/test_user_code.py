"""Jobs of a team's own PySpark code (`kind: python`, `jobs.user_code`), the code in a directory
outside the repository: the same rows as a stream and as a batch, the platform's dead letters
beside the team's rows, and every way the code can be wrong named before a query starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.analysis import analyse
from jobs.batch import batch_rows
from ops.exceptions import ConfigError
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import write_batch
from synthetic.scenarios import impressions_plays_scenario
from tests.support.spark import run_available_now
from tests.support.team_jobs import (
    BUGGY_SCORING_MODULE,
    CONVERSIONS_QUERY,
    LARGE_AMOUNT,
    SQL_JOB,
    sql_job_spec,
    team_job_spec,
    write_team_code,
    write_team_job,
)

REPO = Path(__file__).resolve().parents[2]


def test_a_team_job_streams_the_rows_a_batch_run_gives_with_the_dead_letters_beside_them(
    spark: SparkSession, platform_conf: PlatformConfig, tmp_path: Path
) -> None:
    code = write_team_code(tmp_path / "team-code")
    assert not code.resolve().is_relative_to(REPO)
    write_team_job(platform_conf, team_job_spec(code))
    for seed in range(2):
        write_batch(platform_conf.landing_root / "events", 200, 0.05, seed, file_name=f"events-{seed}.json")
    spec = find_job("fraud_scores", platform_conf.conf_dir)

    run_available_now(spark, platform_conf, spec)

    streamed = spark.read.parquet(str(platform_conf.lake_root / "fraud_scores"))
    batch = batch_rows(spark, platform_conf, spec, platform_conf.landing_root)
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
    sizes = {row["size"]: row["count"] for row in streamed.groupBy("size").count().collect()}
    assert set(sizes) == {"large", "small", "dead_letter"}
    # The pandas UDF of the team's other module ran in Spark's Python workers.
    wrong = streamed.where(
        f"size = 'large' AND amount < {LARGE_AMOUNT} OR size = 'small' AND amount >= {LARGE_AMOUNT}"
    ).count()
    assert wrong == 0
    dead = streamed.where("size = 'dead_letter'").select("dead_letter_reason", "raw", "event_id").collect()
    assert dead and all(row["dead_letter_reason"] and row["raw"] and row["event_id"] is None for row in dead)


def test_a_change_of_the_teams_code_is_a_new_config_version(
    platform_conf: PlatformConfig, tmp_path: Path
) -> None:
    code = write_team_code(tmp_path / "team-code")
    write_team_job(platform_conf, team_job_spec(code))
    before = find_job("fraud_scores", platform_conf.conf_dir).config_version
    (code / "fraud" / "__pycache__").mkdir()
    (code / "fraud" / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"cache")
    assert find_job("fraud_scores", platform_conf.conf_dir).config_version == before

    write_team_code(code, BUGGY_SCORING_MODULE)

    assert find_job("fraud_scores", platform_conf.conf_dir).config_version != before


def test_the_code_directory_may_be_relative_to_the_job_file(platform_conf: PlatformConfig) -> None:
    code = write_team_code(platform_conf.conf_dir / "team-code")
    write_team_job(platform_conf, team_job_spec(Path("..") / "team-code"))

    assert Path(find_job("fraud_scores", platform_conf.conf_dir).pipeline.code) == code.resolve()


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        (
            {"partition_columns": ["event_date", "size"]},
            "must end in 'event_date' or 'event_date', 'event_hour'",
        ),
        ({"entrypoint": "fraud.scoring"}, "field 'pipeline.python.entrypoint': String should match pattern"),
        (
            {"code": "/nonexistent/team-code"},
            "field 'pipeline.code': /nonexistent/team-code is not a directory",
        ),
    ],
)
def test_a_bad_team_job_file_is_refused_naming_its_field(
    platform_conf: PlatformConfig, tmp_path: Path, pipeline: dict[str, object], message: str
) -> None:
    code = write_team_code(tmp_path / "team-code")
    write_team_job(platform_conf, team_job_spec(code, **pipeline))

    with pytest.raises(ConfigError, match=message):
        find_job("fraud_scores", platform_conf.conf_dir)


BROKEN_CODE = {
    "missing_package": (
        "import fraud_models_not_installed\n\ndef build(inputs, context):\n    return inputs['events']\n",
        "pipeline.entrypoint",
        "fraud.scoring imports 'fraud_models_not_installed', which the platform's Python environment "
        "does not have",
    ),
    "missing_function": (
        "def score(inputs, context):\n    return inputs['events']\n",
        "pipeline.entrypoint",
        "fraud.scoring has no function 'build'",
    ),
    "raises": (
        "def build(inputs, context):\n    raise ValueError('no model for ' + context.job)\n",
        "pipeline.entrypoint",
        "fraud.scoring:build raised ValueError: no model for fraud_scores at fraud/scoring.py:2",
    ),
    "no_partition_column": (
        "from pyspark.sql import functions as F\n\n"
        "def build(inputs, context):\n"
        "    return inputs['events'].drop('event_hour').withColumn('size', F.lit('x'))\n",
        "pipeline.partition_columns",
        "lack the partition columns ['event_hour']",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CODE))
def test_the_analyzer_names_what_is_wrong_with_the_teams_code(
    spark: SparkSession, platform_conf: PlatformConfig, tmp_path: Path, case: str
) -> None:
    source, field, message = BROKEN_CODE[case]
    code = write_team_code(tmp_path / "team-code")
    (code / "fraud" / "scoring.py").write_text(source)
    write_team_job(platform_conf, team_job_spec(code))

    problems = analyse(spark, platform_conf, find_job("fraud_scores", platform_conf.conf_dir))

    assert list(problems) == [field]
    assert message in problems[field]


def test_a_sql_jobs_stream_stream_join_streams_the_rows_a_batch_run_gives(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    write_team_job(platform_conf, sql_job_spec())
    impressions_plays_scenario(platform_conf.landing_root, 600, seed=3)
    spec = find_job(SQL_JOB, platform_conf.conf_dir)

    run_available_now(spark, platform_conf, spec)

    streamed = spark.read.parquet(str(platform_conf.lake_root / SQL_JOB))
    batch = batch_rows(spark, platform_conf, spec, platform_conf.landing_root)
    assertDataFrameEqual(streamed.select(*batch.columns), batch)
    outcomes = {row["outcome"]: row["count"] for row in streamed.groupBy("outcome").count().collect()}
    assert outcomes["converted"] > 0 and outcomes["dead_letter"] > 0


def test_the_analyzer_names_what_spark_refuses_in_a_sql_jobs_query(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    write_team_job(platform_conf, sql_job_spec(CONVERSIONS_QUERY.replace("p.play_id", "p.play")))

    problems = analyse(spark, platform_conf, find_job(SQL_JOB, platform_conf.conf_dir))

    assert list(problems) == ["pipeline.query"]
    assert problems["pipeline.query"].startswith("the query raised AnalysisException: [UNRESOLVED_COLUMN")


def test_the_analyzer_starts_a_sql_jobs_query_over_empty_streams_and_names_what_streaming_refuses(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    write_team_job(platform_conf, sql_job_spec())
    assert analyse(spark, platform_conf, find_job(SQL_JOB, platform_conf.conf_dir)) == {}

    # A count per profile with no watermark could never be appended: its groups never close.
    unbounded = sql_job_spec(
        "SELECT profile_id, 'counted' AS outcome, event_date, event_hour, count(*) AS impressions "
        "FROM impressions GROUP BY profile_id, event_date, event_hour"
    )
    unbounded["pipeline"]["watermarks"] = {}
    write_team_job(platform_conf, unbounded)

    problems = analyse(spark, platform_conf, find_job(SQL_JOB, platform_conf.conf_dir))

    assert list(problems) == ["pipeline.query"]
    assert problems["pipeline.query"].startswith("Spark cannot run it as a stream: ")
    assert "watermark" in problems["pipeline.query"]
