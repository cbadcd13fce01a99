"""The warehouse_writer job, a python job that ships with the platform: exact rows from its
function and the platform's dead letters, its parameter checked, and the real streaming query's
file bound."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.parsing import parse_events
from jobs.user_code import UserCodeError, user_rows
from ops.spec.job import find_job
from ops.spec.pipelines import PythonPipeline
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from synthetic.generator import write_batch
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now

JOB = "warehouse_writer"
SPEC = find_job(JOB, DEFAULT_CONF_DIR)
assert isinstance(SPEC.pipeline, PythonPipeline)
SOURCE = SPEC.pipeline.sources["events"]
WAREHOUSE_SCHEMA = (
    "event_id string, event_time string, user_id string, event_type string, country string, device string, "
    "page string, amount double, dead_letter_reason string, raw string, route string, event_date date, "
    "event_hour int"
)


def event(event_id: str, event_time: str, **fields: Any) -> str:
    return json.dumps(
        {"event_id": event_id, "event_time": event_time, "user_id": "u1", "event_type": "view", **fields}
    )


def test_events_partitioned_by_event_hour_malformed_lines_apart(spark: SparkSession) -> None:
    before_midnight = event("e1", "2024-12-31T23:59:59.999Z", country="DE", page="/")
    after_midnight = event("e2", "2025-01-01T00:00:00.000Z", event_type="purchase", amount=9.5)
    no_time = event("e3", "soon")
    bad_time = "field 'event_time': cannot parse 'soon' as timestamp"
    lines = [before_midnight, after_midnight, no_time, "{"]
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    rows = user_rows({"events": raw.transform(parse_events, SOURCE)}, SPEC.pipeline, JOB)
    expected = spark.createDataFrame(
        [
            ("e1", "2024-12-31 23:59:59.999", "u1", "view", "DE", None, "/", None, None, None, "events",
             dt.date(2024, 12, 31), 23),
            ("e2", "2025-01-01 00:00:00", "u1", "purchase", None, None, None, 9.5, None, None, "events",
             dt.date(2025, 1, 1), 0),
            (None, None, None, None, None, None, None, None, bad_time, no_time, "dead_letter", None, None),
            (None, None, None, None, None, None, None, None, "invalid JSON", "{", "dead_letter", None, None),
        ],
        WAREHOUSE_SCHEMA,
    )  # fmt: skip
    expected = expected.withColumn("event_time", F.col("event_time").cast("timestamp"))
    assertDataFrameEqual(rows.select(*expected.columns), expected)


@pytest.mark.parametrize("value", [0, 257, "2"])
def test_a_max_files_parameter_out_of_range_is_the_jobs_error(spark: SparkSession, value: object) -> None:
    pipeline = SPEC.pipeline.model_copy(update={"parameters": {"max_files_per_partition": value}})
    raw = spark.createDataFrame([], "value string").transform(parse_events, SOURCE)

    with pytest.raises(UserCodeError, match="max_files_per_partition must be a whole number from 1 to 256"):
        user_rows({"events": raw}, pipeline, JOB)


@pytest.fixture
def eight_uncoalesced_shuffle_partitions(spark: SparkSession) -> Iterator[None]:
    """8 shuffle partitions, all kept: the worst case, as with big batches, more tasks than the bound.

    Adaptive execution (on for stateless streaming queries) would otherwise merge a small batch's
    shuffle partitions into one task, which writes one file per directory anyway.
    """
    confs = {"spark.sql.shuffle.partitions": "8", "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    previous = {key: spark.conf.get(key) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    yield
    for key, value in previous.items():
        spark.conf.set(key, value)


def files_per_batch(sink_log: Path, partition: str) -> list[int]:
    """How many files each committed batch of the sink log wrote under `partition`."""
    counts = []
    entries = [path for path in sink_log.iterdir() if path.name.isdigit()]
    for entry in sorted(entries, key=lambda path: int(path.name)):
        paths = [json.loads(line)["path"] for line in entry.read_text().splitlines()[1:]]
        counts.append(sum(f"/{partition}/" in path for path in paths))
    return counts


def warehouse(spark: SparkSession, platform: PlatformConfig) -> DataFrame:
    return spark.read.parquet(str(platform.lake_root / SPEC.pipeline.sink.path))


@pytest.mark.usefixtures("eight_uncoalesced_shuffle_partitions")
def test_stream_writes_at_most_n_files_per_hour_per_batch_and_every_row(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    def three_files_one_landing_file_per_batch(spec: dict[str, Any]) -> None:
        spec["pipeline"]["parameters"]["max_files_per_partition"] = 3
        spec["operations"]["trigger"]["max_files_per_trigger"] = 1

    edit_job(platform_conf, JOB, three_files_one_landing_file_per_batch)
    spec = find_job(JOB, platform_conf.conf_dir)
    landing = platform_conf.landing_root / SOURCE.path
    hour = dt.datetime(2025, 1, 1, 10, tzinfo=dt.UTC)
    # Two landing files, two batches, 400 lines each, all in 10:00-10:59.
    batches = [write_batch(landing, 400, 0.05, seed, start=hour, span_seconds=3600) for seed in (1, 2)]
    run_available_now(spark, platform_conf, spec)

    sink_log = platform_conf.lake_root / SPEC.pipeline.sink.path / "_spark_metadata"
    per_batch = files_per_batch(sink_log, "route=events/event_date=2025-01-01/event_hour=10")
    # At most 3 files per batch in the hour, and more than one: the rows were spread by the salt.
    assert len(per_batch) == 2 and all(2 <= files <= 3 for files in per_batch), per_batch
    rows = warehouse(spark, platform_conf)
    events = rows.where("route = 'events' AND event_date = '2025-01-01' AND event_hour = 10")
    assert Counter(row.event_id for row in events.collect()) == Counter(
        e["event_id"] for batch in batches for e in batch.events
    )
    dead = rows.where("route = 'dead_letter'").select("raw").collect()
    assert Counter(row.raw for row in dead) == Counter(
        line.line for batch in batches for line in batch.malformed
    )
    assert rows.count() == sum(batch.total for batch in batches)
