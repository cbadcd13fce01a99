"""The Flink comparison's own logic, without Flink: what it counts and the SQL it renders.

Running the Flink side needs the PyFlink venv (about a minute to install), so it is not run
here; every `python -m benchmarks.flink_compare` run instead fails unless both sides wrote the
same rows into every sink partition (`--quick` for a two-minute smoke).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.flink import router
from benchmarks.flink.landing_sql import DEFAULT_PARTITION
from benchmarks.flink_compare import COMPARISONS, flink_partition_counts
from ops.config import find_job, load_jobs


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
