"""The enricher job: mapping semantics, exact transform rows, and side inputs refreshed mid-stream."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from jobs.enricher.mapping import MappingConflict, apply_mapping, mapping_version, parse_mapping
from jobs.enricher.side_inputs import MAPPING_STATUS
from jobs.enricher.transform import enrich
from jobs.parsing import parse_events, with_event_partitions
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.driver.reference_tables import publish_reference
from ops.spec.job import find_job
from ops.spec.pipelines import EnricherPipeline
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from synthetic.scenarios import write_json_lines
from tests.support.drivers import edit_job

JOB = "enricher"
SPEC = find_job(JOB, DEFAULT_CONF_DIR)
assert isinstance(SPEC.pipeline, EnricherPipeline)
PIPELINE = SPEC.pipeline
TITLES = pa.schema(
    [
        ("title_id", pa.string()),
        ("title_name", pa.string()),
        ("genre", pa.string()),
        ("release_year", pa.int64()),
    ]
)
OUTPUT_SCHEMA = (
    "event_id string, event_time timestamp, title_id string, title_name string, genre string, "
    "release_year long, reference_version string, lookup_hit boolean, document string, "
    "mapping_version string, "
    "dead_letter_reason string, raw string, route string, event_date date, event_hour int"
)


def ops(text: str) -> list[dict[str, Any]]:
    return json.loads(parse_mapping(text).canonical_json())


# --- mapping semantics (no Spark) -------------------------------------------------------------


def test_rename_moves_nested_values_and_creates_parents() -> None:
    document = {"a": {"b": 1, "c": 2}, "x": 0}
    mapped = apply_mapping(
        document, ops("operations: [{rename: {from: a.b, to: d.e}}, {rename: {from: nope, to: z}}]")
    )
    assert json.dumps(mapped) == '{"a": {"c": 2}, "x": 0, "d": {"e": 1}}'


def test_default_fills_absent_or_null_only() -> None:
    mapping = ops("operations: [{default: {field: a.b, value: [1]}}, {default: {field: c, value: k}}, "
                  "{default: {field: d, value: k}}]")  # fmt: skip
    mapped = apply_mapping({"c": None, "d": False}, mapping)
    assert mapped == {"c": "k", "d": False, "a": {"b": [1]}}


def test_shift_projects_only_the_listed_paths_in_order() -> None:
    mapping = ops("operations: [{shift: {p.q: out.first, missing: out.never, id: out.id}}]")
    assert json.dumps(apply_mapping({"id": 7, "p": {"q": None, "r": 1}, "s": 2}, mapping)) == (
        '{"out": {"first": null, "id": 7}}'
    )


def test_writing_through_a_non_object_is_a_conflict() -> None:
    with pytest.raises(MappingConflict, match="cannot set 'a.b': 'a' is not an object"):
        apply_mapping({"a": 1, "c": 2}, ops("operations: [{rename: {from: c, to: a.b}}]"))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("operations: [{rename: {from: a, to: a.b}}]", "one is inside the other"),
        ("operations: [{shift: {a: x, b: x.y}}]", "overlap"),
        ("operations: [{explode: {field: a}}]", "operations.0"),
        ("operations: [{default: {field: 'a..b', value: 1}}]", "operations.0"),
        ("operations: []", "operations"),
        ("operations: [", "not valid YAML"),
    ],
)
def test_invalid_mappings_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_mapping(text)


# --- the transform on inline frames ----------------------------------------------------------

MAPPING = """
operations:
  - default: {field: device.os, value: unknown}
  - rename: {from: device.os, to: platform}
  - shift: {event_id: id, platform: platform, reference.genre: title.genre, profile.country: country}
  - default: {field: title.genre, value: unclassified}
"""


def line(event_id: str, title_id: str, **fields: Any) -> str:
    return json.dumps(
        {"event_id": event_id, "event_time": "2025-01-01T10:00:00Z", "title_id": title_id, **fields}
    )


def test_join_hit_and_miss_nested_mapping_and_dead_letters(spark: SparkSession) -> None:
    hit = line("e1", "t1", device={"os": "ios"}, profile={"country": "DE"})
    miss = line("e2", "t9")
    conflict = line("e3", "t1", device="tv")
    malformed = json.dumps({"event_id": "e4", "event_time": "2025-01-01T10:00:00Z"})
    lines = [hit, miss, conflict, malformed]
    events = (
        spark.createDataFrame([(text,) for text in lines], "value string")
        .transform(parse_events, PIPELINE.source)
        .transform(with_event_partitions, PIPELINE.source)
    )
    reference = spark.createDataFrame(
        [("t1", "One", None, 1999, "v1"), ("t2", "Two", "drama", 2001, "v1")],
        "title_id string, title_name string, genre string, release_year long, reference_version string",
    )
    canonical = parse_mapping(MAPPING).canonical_json()
    version = mapping_version(canonical)
    mapping = spark.createDataFrame([(version, canonical, None)], "a string, b string, c string").toDF(
        "mapping_version", "mapping_json", "mapping_problem"
    )
    rows = enrich(events, reference, mapping, PIPELINE)
    at, day = dt.datetime(2025, 1, 1, 10), dt.date(2025, 1, 1)
    conflict_reason = "mapping: cannot set 'device.os': 'device' is not an object"
    expected = spark.createDataFrame(
        [
            ("e1", at, "t1", "One", None, 1999, "v1", True,
             '{"id":"e1","platform":"ios","country":"DE","title":{"genre":"unclassified"}}', version,
             None, None, "enriched", day, 10),
            ("e2", at, "t9", None, None, None, None, False,
             '{"id":"e2","platform":"unknown","title":{"genre":"unclassified"}}', version, None, None,
             "enriched", day, 10),
            ("e3", at, "t1", None, None, None, None, None, None, None, conflict_reason, conflict,
             "dead_letter", day, 10),
            ("e4", at, None, None, None, None, None, None, None, None, "missing required field 'title_id'",
             malformed, "dead_letter", day, 10),
        ],
        OUTPUT_SCHEMA,
    )  # fmt: skip
    assertDataFrameEqual(rows, expected)


# --- side inputs in a running query ------------------------------------------------------------


def titles(version: str, genre: str) -> pa.Table:
    return pa.Table.from_pylist([{"title_id": "t1", "title_name": f"One {version}", "genre": genre}], TITLES)


def enriched(spark: SparkSession, platform: PlatformConfig) -> DataFrame:
    return (
        spark.read.parquet(str(platform.lake_root / PIPELINE.sink.path))
        .where("route = 'enriched'")
        .select("event_id", "title_name", "reference_version", "document", "mapping_version")
    )


def test_reference_refresh_and_mapping_reload_apply_from_the_next_batch(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    edit_job(platform_conf, JOB, lambda spec: spec["operations"]["trigger"].update(interval_seconds=1))
    spec = find_job(JOB, platform_conf.conf_dir)
    reference_root = platform_conf.lake_root / PIPELINE.reference.path
    mapping_path = platform_conf.conf_dir / PIPELINE.mapping
    landing = platform_conf.landing_root / PIPELINE.source.path
    first_mapping = "operations: [{shift: {event_id: id, reference.genre: genre}}]"
    second_mapping = "operations: [{shift: {event_id: id, reference.title_name: name}}]"
    mapping_path.write_text(first_mapping)
    v1 = publish_reference(reference_root, "v1", titles("v1", "drama"))
    query = with_trigger(plan_job(platform_conf, spec), spec, available_now=False)(spark).start()
    try:
        write_json_lines(landing, "a.json", [line("e1", "t1")])
        query.processAllAvailable()
        # A new version replaces the old one (deleted), and the mapping file is edited.
        publish_reference(reference_root, "v2", titles("v2", "comedy"))
        shutil.rmtree(v1)
        mapping_path.write_text(second_mapping)
        write_json_lines(landing, "b.json", [line("e2", "t1")])
        query.processAllAvailable()
        # An invalid edit: refused, the previous mapping stays, the problem is reported.
        mapping_path.write_text("operations: [{rename: {from: a}}]")
        write_json_lines(landing, "c.json", [line("e3", "t1")])
        query.processAllAvailable()
        observed = query.lastProgress["observedMetrics"]["enricher"]
        # Stateless: nothing is held between batches, so state cannot grow.
        assert query.lastProgress["stateOperators"] == []
    finally:
        query.stop()
    assert query.exception() is None
    first, second = (
        mapping_version(parse_mapping(text).canonical_json()) for text in (first_mapping, second_mapping)
    )
    expected = spark.createDataFrame(
        [
            ("e1", "One v1", "v1", '{"id":"e1","genre":"drama"}', first),
            ("e2", "One v2", "v2", '{"id":"e2","name":"One v2"}', second),
            ("e3", "One v2", "v2", '{"id":"e3","name":"One v2"}', second),
        ],
        "event_id string, title_name string, reference_version string, document string, "
        "mapping_version string",
    )
    assertDataFrameEqual(enriched(spark, platform_conf), expected)
    status = json.loads((platform_conf.job_runtime_dir(JOB) / MAPPING_STATUS).read_text())
    assert status["mapping_version"] == second
    assert status["problem"].startswith(f"{mapping_path}: field 'operations.0")
    assert observed["mapping_problem"] == status["problem"]
    assert observed["mapping_version"] == second


def test_a_static_parquet_side_is_listed_once(spark: SparkSession, tmp_path: Path) -> None:
    """Why the side inputs are data sources: a plain Parquet static side breaks once replaced."""
    table, landing = tmp_path / "table", tmp_path / "landing"
    spark.createDataFrame([("t1", "old")], "k string, v string").write.parquet(str(table))
    static = spark.read.parquet(str(table))
    stream = spark.readStream.format("text").load(str(landing.mkdir() or landing))
    joined = stream.join(static, F.col("value") == F.col("k"), "left")
    query = (
        joined.writeStream.format("memory")
        .queryName("static_side")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        (landing / "a.txt").write_text("t1\n")
        query.processAllAvailable()
        shutil.rmtree(table)
        spark.createDataFrame([("t1", "new")], "k string, v string").write.parquet(str(table))
        (landing / "b.txt").write_text("t1\n")
        with pytest.raises(StreamingQueryException, match="FAILED_READ_FILE.FILE_NOT_EXIST"):
            query.processAllAvailable()
    finally:
        query.stop()
    assert [tuple(row) for row in spark.table("static_side").collect()] == [("t1", "t1", "old")]
