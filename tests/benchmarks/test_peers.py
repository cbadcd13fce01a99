"""The peers benchmark's own logic: rotation, ratios, the route check, the Flink json SQL and the
pyarrow floor on a tiny input (real pyarrow; the Spark and Flink sides run in `python -m
benchmarks.peers --quick`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from benchmarks.arrow_router import route_files
from benchmarks.flink import router_json
from benchmarks.peers import CONTENDERS, Timed, check_routes, compare, ratio_lines, rotated, targets_table
from ops.spec.job import find_job
from synthetic.generator import write_batch


def test_each_round_starts_with_the_next_contender() -> None:
    assert [rotated(CONTENDERS, r)[0] for r in range(1, 6)] == [*CONTENDERS, CONTENDERS[0]]
    assert rotated(CONTENDERS, 2) == ["bare", "flink", "pyarrow", "router"]


def test_compare_runs_every_contender_once_per_round_in_rotated_order(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    def runner(contender: str, _workdir: Path, round_no: int, _echo: object) -> tuple[float, Counter]:
        calls.append((contender, round_no))
        return 1.0, Counter()

    timed = compare(tmp_path, 3, ("router", "bare", "flink"), lambda _line: None, runner)
    assert calls == [
        ("router", 1), ("bare", 1), ("flink", 1),
        ("bare", 2), ("flink", 2), ("router", 2),
        ("flink", 3), ("router", 3), ("bare", 3),
    ]  # fmt: skip
    assert all(t.load >= 0 for t in timed)


def timed(contender: str, round_no: int, wall: float, counts: dict | None = None) -> Timed:
    return Timed(contender, round_no, wall, 1.0, Counter(counts or {}))


def test_ratios_are_peer_time_over_router_time_per_round_and_their_median() -> None:
    runs = [timed("router", 1, 10), timed("bare", 1, 9), timed("router", 2, 10), timed("bare", 2, 5)]
    runs += [timed("router", 3, 20), timed("bare", 3, 16)]
    lines, medians = ratio_lines(runs, 3)
    assert medians == {"bare": 0.8}
    assert lines == ["  router / bare: round 1 0.90x  round 2 0.50x  round 3 0.80x   median 0.80x"]


def test_the_route_check_ignores_dead_letters_and_fails_on_a_routed_difference() -> None:
    router = {("purchases", "2025-01-01", "0"): 5, ("dead_letter", "null", "null"): 2}
    same = {("purchases", "2025-01-01", "0"): 5}
    check_routes([timed("router", 1, 1, router), timed("flink", 1, 1, same)], lambda _line: None, strict=True)
    other = {("purchases", "2025-01-01", "0"): 4}
    with pytest.raises(RuntimeError, match=r"flink routed different rows"):
        check_routes(
            [timed("router", 1, 1, router), timed("flink", 1, 1, other)], lambda _line: None, strict=True
        )
    check_routes(
        [timed("router", 1, 1, router), timed("flink", 1, 1, other)], lambda _line: None, strict=False
    )


def test_the_targets_table_gives_each_figure_with_its_target_and_the_malformed_change_in_points() -> None:
    router = {
        "clean": {"bare": 0.66, "flink": 0.81, "pyarrow": 0.12},
        "2% malformed": {"bare": 0.70, "flink": 0.9},
    }
    trigger = {"events/s per batch": 12840.4, "events/s over the run": 8953.0}
    assert targets_table(router, 0.74, trigger) == [
        "| figure | median | target |",
        "|---|---|---|",
        "| router / bare PySpark, clean | 0.66x | >= 0.9x |",
        "| router / PyFlink json, clean | 0.81x | >= 1.2x |",
        "| router / pyarrow floor | 0.12x | >= 0.45x |",
        "| router / bare PySpark, 2% malformed | 0.70x (+4 points) | within 5 points of clean |",
        "| sessionizer / PyFlink json (median walls) | 0.74x | >= 1.5x |",
        "| router events/s, trigger 5 s, 50 files a batch | 12,840 per batch, 8,953 over the run | - |",
    ]
    assert len(targets_table({"clean": router["clean"]}, None, None)) == 5


def test_the_flink_json_sql_reads_the_json_format_once_and_fans_out() -> None:
    statements = router_json.statements(find_job("router"), Path("/landing"), Path("/out"))
    assert "'format' = 'json'" in statements[0]
    assert "'path' = '/landing/events'" in statements[0]
    assert "JSON_VALUE" not in " ".join(statements)
    assert "CROSS JOIN UNNEST" in statements[-1]


def test_the_pyarrow_floor_routes_the_spec_routes_into_hive_partitions(tmp_path: Path) -> None:
    batch = write_batch(tmp_path / "landing", 2000, seed=3)
    spec = find_job("router")
    written = route_files(spec, tmp_path / "landing", tmp_path / "out")
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    routes = Counter(table.column("route").to_pylist())
    events = batch.events
    eu = {"DE", "FR", "ES", "IT", "NL"}
    expected = Counter(
        {
            "purchases": sum(e["event_type"] == "purchase" and (e.get("amount") or 0) > 0 for e in events),
            "eu_views": sum(e["event_type"] == "view" and e.get("country") in eu for e in events),
            "mobile_activity": sum(e.get("device") in ("ios", "android") for e in events),
        }
    )
    assert routes == +expected
    assert written == table.num_rows
    purchases = table.filter(ds.field("route") == "purchases")
    assert purchases.column("page").null_count == purchases.num_rows
