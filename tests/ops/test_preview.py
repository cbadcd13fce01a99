"""Preview taps: a real streaming run keeps the newest records per stage; `warden preview` shows them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.preview import start_taps
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.cli import main
from ops.driver.preview import read_preview
from ops.exceptions import PreviewError
from ops.spec.job import find_job
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from synthetic.scenarios import write_json_lines
from tests.support.drivers import edit_job
from tests.support.platform import copy_job


def event(number: int) -> str:
    return json.dumps(
        {
            "event_id": f"e{number:02d}",
            "event_time": f"2025-01-01T10:{number:02d}:00Z",
            "user_id": "u1",
            "event_type": "purchase",
            "amount": float(number),
        }
    )


def tap_parsed_and_output(spec: dict[str, Any]) -> None:
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    spec["operations"]["preview"] = {"stages": ["parsed", "output"], "records": 5}


def test_taps_keep_the_newest_records_and_the_cli_shows_them(
    spark: SparkSession, platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_job(platform_conf, "router", tap_parsed_and_output)
    spec = find_job("router", platform_conf.conf_dir)
    with pytest.raises(PreviewError, match="has captured nothing yet"):
        read_preview(platform_conf, spec, "parsed")
    landing = platform_conf.landing_root / "events"
    query = with_trigger(plan_job(platform_conf, spec), spec, available_now=False)(spark).start()
    taps = start_taps(spark, platform_conf, spec, available_now=False)
    try:
        assert sorted(q.name for q in spark.streams.active) == [
            "router",
            "router.preview.output",
            "router.preview.parsed",
        ]
        write_json_lines(landing, "a.json", [event(n) for n in range(1, 9)], age_seconds=10)
        write_json_lines(landing, "b.json", [event(n) for n in range(9, 15)] + ["{not json"])
        for running in (query, *taps):
            running.processAllAvailable()
    finally:
        for running in (query, *taps):
            running.stop()
    assert all(running.exception() is None for running in (query, *taps))

    parsed = read_preview(platform_conf, spec, "parsed")
    assert [record["event_id"] for record in parsed.records] == ["e11", "e12", "e13", "e14", None]
    assert parsed.records[-1]["dead_letter_reason"] == "invalid JSON"
    output = read_preview(platform_conf, spec, "output")
    assert [(record["route"], record["event_id"]) for record in output.records] == [
        ("purchases", "e11"),
        ("purchases", "e12"),
        ("purchases", "e13"),
        ("purchases", "e14"),
        ("dead_letter", None),
    ]

    assert main(["preview", "router", "parsed", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    # structlog, unconfigured in tests, logged the taps' start to stdout before the table.
    lines = out[out.index("router / parsed") :].splitlines()
    assert lines[0] == "router / parsed: newest 2 of 5 records, batch 1"
    assert lines[1].split() == [
        "event_id", "event_time", "user_id", "event_type", "country", "device", "page", "amount",
        "dead_letter_reason", "raw",
    ]  # fmt: skip
    assert lines[2].split()[:5] == ["e14", "2025-01-01", "10:14:00", "u1", "purchase"]
    assert lines[3].split() == ["invalid", "JSON", "{not", "json"]
    assert len(lines) == 4

    assert main(["preview", "router", "routed"]) == 2
    assert "no preview tap on stage 'routed' of job 'router' (tapped stages: parsed, output)" in (
        capsys.readouterr().err
    )


def test_without_taps_nothing_extra_runs_and_the_sink_is_the_same(
    spark: SparkSession, platform_conf: PlatformConfig
) -> None:
    edit_job(platform_conf, "router", tap_parsed_and_output)
    copy_job(platform_conf.conf_dir, "router", "router_plain")

    def untapped(spec: dict[str, Any]) -> None:
        spec["operations"]["preview"] = {"stages": []}
        spec["pipeline"]["sink"]["path"] = "router_plain"

    edit_job(platform_conf, "router_plain", untapped)
    landing = platform_conf.landing_root / "events"
    write_json_lines(landing, "a.json", [event(n) for n in range(1, 9)] + ["{"], age_seconds=10)
    write_json_lines(landing, "b.json", [event(n) for n in range(9, 15)])
    sinks = []
    for job in ("router", "router_plain"):
        spec = find_job(job, platform_conf.conf_dir)
        query = with_trigger(plan_job(platform_conf, spec), spec, available_now=False)(spark).start()
        taps = start_taps(spark, platform_conf, spec, available_now=False)
        try:
            if job == "router_plain":
                assert taps == []
                assert [q.name for q in spark.streams.active] == ["router_plain"]
            for running in (query, *taps):
                running.processAllAvailable()
        finally:
            for running in (query, *taps):
                running.stop()
        sinks.append(spark.read.parquet(str(platform_conf.lake_root / spec.pipeline.sink.path)))
    assert sinks[0].count() == 15
    assert not (platform_conf.job_runtime_dir("router_plain") / "preview").exists()
    assertDataFrameEqual(sinks[0], sinks[1])


def test_the_shipped_router_taps_its_output(
    spark: SparkSession, platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    # The repo's router file as shipped (only its metrics port differs), so the demo has a tap to show.
    shipped = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    edit_job(
        platform_conf,
        "router",
        lambda spec: spec["operations"].update(preview=shipped["operations"]["preview"]),
    )
    spec = find_job("router", platform_conf.conf_dir)
    assert spec.operations.preview.stages == ("output",)
    write_json_lines(platform_conf.landing_root / "events", "a.json", [event(n) for n in range(1, 4)])
    query = with_trigger(plan_job(platform_conf, spec), spec, available_now=True)(spark).start()
    taps = start_taps(spark, platform_conf, spec, available_now=True)
    for running in (query, *taps):
        running.awaitTermination(300)
    assert all(running.exception() is None for running in (query, *taps))

    assert main(["preview", "router", "output"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("router / output") :].splitlines()
    assert lines[0] == "router / output: newest 3 of 3 records, batch 0"
    assert [line.split()[:2] for line in lines[2:]] == [
        ["purchases", "e01"],
        ["purchases", "e02"],
        ["purchases", "e03"],
    ]
