"""attack_chains: sequence, threshold-then and distinct-count rules, batch and stream."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.attack_chains.transform import SINK_COLUMNS, attack_chains
from jobs.catalog import sink_rows
from jobs.parsing import parse_events
from ops.driver.listener import state_rows
from ops.exceptions import ConfigError
from ops.spec.job import find_job
from ops.spec.pipelines import AttackChainsPipeline
from ops.spec.platform import PlatformConfig
from tests.jobs.test_campaign_uniques import (
    assert_state_levels_off,
    one_file_per_batch,
    run_stream,
    write_landing,
)
from tests.support.drivers import edit_job

JOB = "attack_chains"
SCHEMA = (
    "output string, rule string, key string, event_ids array<string>, event_times array<timestamp>, "
    "dead_letter_reason string, raw string, event_date date"
)
ROW = tuple[object, ...]


def sec(event_id: str, at: str, **fields: str) -> str:
    return json.dumps({"event_id": event_id, "event_time": f"2025-01-01T{at}Z", **fields})


def download(event_id: str, at: str, host: str) -> str:
    return sec(event_id, at, event_type="download", host=host)


def execute(event_id: str, at: str, host: str) -> str:
    return sec(event_id, at, event_type="exec", host=host)


def login(event_id: str, at: str, user: str, outcome: str) -> str:
    return sec(event_id, at, event_type="login", user_id=user, outcome=outcome)


def connect(event_id: str, at: str, source: str, target: str) -> str:
    return sec(event_id, at, event_type="connection", src_ip=source, dst_ip=target)


def at(clock: str) -> dt.datetime:
    return dt.datetime.fromisoformat(f"2025-01-01T{clock}")


def row(output: str, rule: str, key: str, events: list[tuple[str, str]]) -> ROW:
    times = [at(clock) for _, clock in events]
    return (output, rule, key, [event_id for event_id, _ in events], times, None, None, times[-1].date())


def dead(reason: str, raw: str) -> ROW:
    return ("dead_letter", None, None, None, None, reason, raw, None)


def pipeline_of(platform: PlatformConfig) -> AttackChainsPipeline:
    pipeline = find_job(JOB, platform.conf_dir).pipeline
    assert isinstance(pipeline, AttackChainsPipeline)
    return pipeline


SCAN = [(f"c{k}", f"10:0{k // 3}:{20 * (k % 3):02d}") for k in range(10)]


def test_batch_rules_windows_and_duplicates(spark: SparkSession, platform_conf: PlatformConfig) -> None:
    pipeline = pipeline_of(platform_conf)
    lines = [
        # B exactly 15:00 after A matches, once, although another B follows; 15:01 does not.
        download("a1", "10:00:00", "h1"),
        execute("b1", "10:15:00", "h1"),
        execute("b1b", "10:20:00", "h1"),
        download("a2", "10:00:00", "h2"),
        execute("b2", "10:15:01", "h2"),
        # Five failures (one resent) then a success within 5 minutes; u2's first failure is too old.
        *[login(f"f{k}", f"10:0{k // 2}:{30 * (k % 2):02d}", "u1", "failure") for k in range(5)],
        login("f0", "10:00:00", "u1", "failure"),
        login("ok1", "10:04:00", "u1", "success"),
        *[login(f"g{k}", f"10:0{k}:00", "u2", "failure") for k in range(5)],
        login("ok2", "10:05:01", "u2", "success"),
        # Ten distinct targets within 3 minutes; two more later do not repeat the match.
        *[connect(event_id, clock, "10.0.0.1", f"10.1.0.{k}") for k, (event_id, clock) in enumerate(SCAN)],
        connect("c10", "10:03:20", "10.0.0.1", "10.1.0.10"),
        connect("c11", "10:03:40", "10.0.0.1", "10.1.0.11"),
        # Nine distinct targets only.
        *[
            connect(f"n{k}", f"10:0{k // 3}:{20 * (k % 3):02d}", "10.0.0.2", f"10.1.0.{k % 9}")
            for k in range(10)
        ],
        "{not json",
    ]
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    actual = attack_chains(parse_events(raw, pipeline.source), pipeline).select(*SINK_COLUMNS)
    failures = [(f"f{k}", f"10:0{k // 2}:{30 * (k % 2):02d}") for k in range(5)]
    expected = [
        row("match", "download_then_exec", "h1", [("a1", "10:00:00"), ("b1", "10:15:00")]),
        row("match", "brute_force_success", "u1", [*failures, ("ok1", "10:04:00")]),
        row("match", "port_scan", "10.0.0.1", SCAN),
        dead("invalid JSON", "{not json"),
    ]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, SCHEMA))


SYNTAX_ERROR = "[PARSE_SYNTAX_ERROR] Syntax error at or near '='. SQLSTATE: 42601 (line 1, pos 13)"
UNKNOWN_OUTCOM = (
    "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `outcom` "
    "cannot be resolved. Did you mean one of the following? [`outcome`, `host`, `raw`, `dst_ip`, `src_ip`]. "
    "SQLSTATE: 42703; line 1 pos 25;"
)


@pytest.mark.parametrize(
    ("rule", "name", "field", "expression", "why"),
    [
        (0, "download_then_exec", "first", "event_type = = 'download'", SYNTAX_ERROR),
        (0, "download_then_exec", "then", "event_type = = 'exec'", SYNTAX_ERROR),
        (1, "brute_force_success", "failure", "event_type = 'login' AND outcom = 'failure'", UNKNOWN_OUTCOM),
        (1, "brute_force_success", "success", "outcome", "is of type string, not boolean"),
        (2, "port_scan", "filter", "event_type = = 'connection'", SYNTAX_ERROR),
    ],
)
def test_a_rule_filter_that_spark_cannot_parse_names_the_field_and_the_rule(
    rule: int,
    name: str,
    field: str,
    expression: str,
    why: str,
    spark: SparkSession,
    platform_conf: PlatformConfig,
) -> None:
    def break_rule(spec: dict[str, Any]) -> None:
        spec["pipeline"]["rules"][rule][field] = expression

    edit_job(platform_conf, JOB, break_rule)
    spec = find_job(JOB, platform_conf.conf_dir)
    raw = spark.createDataFrame([(download("a1", "10:00:00", "h1"),)], "value string")
    with pytest.raises(ConfigError) as raised:
        sink_rows(platform_conf, spec, {"events": raw})
    assert str(raised.value) == (
        f"{platform_conf.conf_dir / 'jobs' / 'attack_chains.yaml'}: field 'pipeline.rules.{rule}.{field}': "
        f"rule {name!r} {field} {expression!r} is not a valid boolean expression: {why}"
    )


@pytest.mark.parametrize("checkpoint_format", [1, 2])
def test_stream_out_of_order_late_and_matches_once(
    checkpoint_format: int, spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec = one_file_per_batch(find_job(JOB, platform_conf.conf_dir))
    spec = spec.model_copy(
        update={"operations": spec.operations.model_copy(update={"checkpoint_format": checkpoint_format})}
    )
    # Watermark of each batch (5 min lateness): b0 none, b1 09:55:30, b2 09:57, b3 09:59, b4 09:59,
    # b5 10:10, b6 10:21:01.
    write_landing(
        platform_conf.landing_root / "security_events",
        [
            [
                login("f1", "10:00:00", "u1", "failure"),
                login("f2", "10:00:30", "u1", "failure"),
                download("a1", "10:00:00", "h1"),
                "{not json",
            ],
            # Out of order within the lateness, and a resent f2.
            [
                login("f4", "10:01:30", "u1", "failure"),
                login("f3", "10:01:00", "u1", "failure"),
                login("f2", "10:00:30", "u1", "failure"),
                login("f5", "10:02:00", "u1", "failure"),
            ],
            [
                login("ok1", "10:04:00", "u1", "success"),
                *[
                    connect(event_id, clock, "10.0.0.1", f"10.1.0.{k}")
                    for k, (event_id, clock) in enumerate(SCAN)
                ],
            ],
            # More targets after the match; a failure older than the watermark (09:59) and one
            # exactly at it (late too: Spark's rule, at or behind).
            [
                connect("c10", "10:03:20", "10.0.0.1", "10.1.0.10"),
                connect("c11", "10:03:40", "10.0.0.1", "10.1.0.11"),
                login("l1", "09:50:00", "u9", "failure"),
                login("l2", "09:59:00", "u8", "failure"),
            ],
            [execute("b1", "10:15:00", "h1")],
            [download("a2", "10:11:00", "h2"), execute("b2", "10:26:01", "h2")],
            # The flush: an event no rule takes, far later.
            [sec("z", "23:59:00", event_type="heartbeat", host="h9").replace("2025-01-01", "2025-01-05")],
        ],
    )
    progress = run_stream(spark, platform_conf, spec)
    sink = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path)).select(*SINK_COLUMNS)
    expected = [
        row("match", "download_then_exec", "h1", [("a1", "10:00:00"), ("b1", "10:15:00")]),
        row(
            "match",
            "brute_force_success",
            "u1",
            [
                ("f1", "10:00:00"),
                ("f2", "10:00:30"),
                ("f3", "10:01:00"),
                ("f4", "10:01:30"),
                ("f5", "10:02:00"),
                ("ok1", "10:04:00"),
            ],
        ),
        row("match", "port_scan", "10.0.0.1", SCAN),
        row("late", "brute_force_success", "u9", [("l1", "09:50:00")]),
        row("late", "brute_force_success", "u8", [("l2", "09:59:00")]),
        dead("invalid JSON", "{not json"),
    ]
    assertDataFrameEqual(sink, spark.createDataFrame(expected, SCHEMA))
    # Every key's state is gone once the watermark passed its windows.
    assert state_rows(progress[-1]) == 0


def test_state_of_a_removed_rule_is_dropped_at_its_next_timer(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    spec = one_file_per_batch(find_job(JOB, platform_conf.conf_dir))
    landing = platform_conf.landing_root / "security_events"
    first = [download("a1", "10:00:00", "h1"), login("f1", "10:00:10", "u1", "failure")]
    write_landing(landing, [first])
    progress = run_stream(spark, platform_conf, spec)
    assert state_rows(progress[-1]) == 2, "h1's download and u1's failure wait in state"

    # The next version drops download_then_exec; h1's timer fires for a rule the job no longer has.
    kept = [rule for rule in pipeline_of(platform_conf).rules if rule.name != "download_then_exec"]
    later = [
        *[login(f"f{k}", f"10:00:{10 * k}", "u1", "failure") for k in range(2, 6)],
        login("ok1", "10:04:00", "u1", "success"),
        execute("b1", "10:05:00", "h1"),
    ]
    flush = [sec("z", "12:00:00", event_type="heartbeat", host="h9")]
    write_landing(landing, [first, later, flush])
    progress = run_stream(spark, platform_conf, one_file_per_batch(spec, rules=kept))
    sink = spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path)).select(*SINK_COLUMNS)
    failures = [(f"f{k}", f"10:00:{10 * k}") for k in range(1, 6)]
    expected = [row("match", "brute_force_success", "u1", [*failures, ("ok1", "10:04:00")])]
    assertDataFrameEqual(sink, spark.createDataFrame(expected, SCHEMA))
    assert state_rows(progress[-1]) == 0


def test_state_stays_bounded(spark: SparkSession, platform_conf: PlatformConfig) -> None:
    spec = one_file_per_batch(find_job(JOB, platform_conf.conf_dir))
    start = dt.datetime(2025, 1, 1, 10)
    files = []
    # The state levels off from the seventh batch on: with 18, the middle and last thirds both
    # lie on the plateau.
    for batch in range(18):
        lines = []
        for i in range(20):
            moment = (start + dt.timedelta(minutes=3 * batch, seconds=9 * i)).isoformat()[11:]
            # Keys move on over time: old keys go quiet, as hosts and sources do.
            lines.append(login(f"e{batch}-{i}", moment, f"u{batch // 3}-{i % 4}", "failure"))
            lines.append(connect(f"k{batch}-{i}", moment, f"10.0.{batch // 3}.{i % 3}", f"10.1.0.{i}"))
        files.append(lines)
    write_landing(platform_conf.landing_root / "security_events", files)
    assert_state_levels_off(run_stream(spark, platform_conf, spec), below=60)
