"""The Flink comparison's own logic, without Flink: what it counts and the SQL it renders.

Running the Flink side needs the PyFlink venv (about a minute to install), so it is not run
here; every `python -m benchmarks.flink_compare` run instead fails unless both sides wrote the
same rows into every sink partition (`--quick` for a two-minute smoke).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.flink import campaign_uniques, router, sessionizer
from benchmarks.flink.landing_sql import DEFAULT_PARTITION
from benchmarks.flink_compare import CHUNKS_START, COMPARISONS, compared_counts, flink_partition_counts
from jobs.campaign_uniques import transform as campaign_uniques_job
from ops.spec.job import find_job, load_jobs
from synthetic.scenarios import SCENARIOS


def write(path: Path, lines: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x,y\n" * lines)


def test_flink_partition_counts_reads_committed_files_by_directory(tmp_path: Path) -> None:
    day = tmp_path / "route=eu_views" / "event_date=2025-01-01"
    write(day / "event_hour=0" / "part-0", 3)
    write(day / "event_hour=0" / "part-1", 2)
    write(day / "event_hour=1" / "part-0", 1)
    # In-progress and marker files are not committed rows.
    write(day / "event_hour=1" / ".part-2.inprogress", 5)
    write(day / "event_hour=1" / "_SUCCESS", 1)
    nulls = (
        tmp_path / "route=dead_letter" / f"event_date={DEFAULT_PARTITION}" / f"event_hour={DEFAULT_PARTITION}"
    )
    write(nulls / "part-0", 4)
    write(tmp_path / "route=a%3Db" / "event_date=2025-01-01" / "event_hour=2" / "part-0", 1)

    assert flink_partition_counts(tmp_path) == Counter(
        {
            ("eu_views", "2025-01-01", "0"): 5,
            ("eu_views", "2025-01-01", "1"): 1,
            ("dead_letter", "null", "null"): 4,
            ("a=b", "2025-01-01", "2"): 1,
        }
    )


def test_every_comparison_is_a_configured_job() -> None:
    assert {comparison.job for comparison in COMPARISONS.values()} <= set(load_jobs().specs)


def test_router_sql_routes_every_route_of_the_spec_and_dead_letters() -> None:
    spec = find_job("router")
    insert = router.statements(spec, Path("/landing"), Path("/out"))[-1]
    routes = [route.name for route in spec.pipeline.routes] + ["dead_letter"]  # type: ignore[union-attr]
    assert [name for name in routes if f"THEN '{name}' END" in insert] == routes
    assert all(f"({route.filter})" in insert for route in spec.pipeline.routes)  # type: ignore[union-attr]


def test_campaign_uniques_sql_writes_the_compared_outputs_and_leaves_out_the_rest() -> None:
    spec = find_job("campaign_uniques")
    insert = campaign_uniques.statements(spec, Path("/landing"), Path("/out"))[-1]
    written = set(re.findall(r"SELECT '(\w+)'", insert))
    assert written == {"hourly_exact", "enriched", "dead_letter"}
    # Every sink column of the Spark job, in its order, and the outputs it writes besides.
    assert [name for name, _ in campaign_uniques.SINK_COLUMNS] == list(campaign_uniques_job.SINK_COLUMNS)
    assert COMPARISONS["campaign_uniques"].uncompared_outputs == {campaign_uniques_job.HOURLY_APPROX}
    assert written | {campaign_uniques.LATE} | campaign_uniques.UNCOMPARED_OUTPUTS == {
        campaign_uniques_job.HOURLY_EXACT,
        campaign_uniques_job.HOURLY_APPROX,
        campaign_uniques_job.ENRICHED,
        campaign_uniques_job.LATE,
        "dead_letter",
    }


def test_the_sessionizer_json_sql_parses_once_and_skips_the_dead_letter_check() -> None:
    spec = find_job("sessionizer")
    parsed_once = sessionizer.json_statements(spec, Path("/landing"), Path("/out"))
    by_json_value = sessionizer.statements(spec, Path("/landing"), Path("/out"))
    assert "JSON_VALUE" not in " ".join(parsed_once)
    tables = [line for line in parsed_once if "'format' = 'json'" in line]
    assert len(tables) == len(spec.pipeline.sources)  # type: ignore[union-attr]
    # Past the sources' views, the same statements: the same sessions and sink.
    assert parsed_once[-4:] == by_json_value[-4:]
    assert COMPARISONS["sessionizer_json"].uncompared_outputs == {"dead_letter"}
    counts = Counter({("sessions", "2025-01-01"): 7, ("dead_letter", "null"): 2})
    compared = compared_counts(counts, COMPARISONS["sessionizer_json"], set(), lambda _line: None)
    assert compared == Counter({("sessions", "2025-01-01"): 7})


def test_the_check_leaves_out_the_flush_partitions_and_the_uncompared_outputs() -> None:
    counts = Counter(
        {
            ("hourly_exact", "2025-01-01"): 5,
            ("hourly_approx", "2025-01-01"): 5,
            ("enriched", "2025-01-31"): 1,
            ("dead_letter", "null"): 2,
        }
    )
    echoed: list[str] = []
    compared = compared_counts(counts, COMPARISONS["campaign_uniques"], {"2025-01-31"}, echoed.append)
    assert compared == Counter({("hourly_exact", "2025-01-01"): 5, ("dead_letter", "null"): 2})
    assert len(echoed) == 2


def event_times(paths: list[Path]) -> list[str]:
    """The well-formed event times of the files' lines, as the generator writes them."""
    times = []
    for path in paths:
        for line in path.read_text().splitlines():
            try:
                moment = json.loads(line).get("event_time", "")
            except json.JSONDecodeError:
                continue
            if re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", moment):
                times.append(moment)
    return times


@pytest.mark.parametrize("job", sorted({c.job for c in COMPARISONS.values() if SCENARIOS[c.job].flush}))
def test_a_stateful_input_is_chunks_in_event_time_order(job: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[job]
    assert scenario.write_from is not None and scenario.period is not None
    first = scenario.write_from(tmp_path, 600, 0, CHUNKS_START)
    second = scenario.write_from(tmp_path, 600, 1, CHUNKS_START + scenario.period)
    assert not set(first) & set(second)
    assert max(event_times(first)) < min(event_times(second))
