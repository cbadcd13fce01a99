"""How a backfill cuts its range into micro-batches: the byte budget, its default, and the slices.

Pure planning (`ops.driver.backfill.feed_batches`, `ops.backfill.plan.batch_budget`, the CLI's
byte argument); the backfill tests run the batches through the job's query
(`tests/ops/test_backfill.py`) and the archive source reads them (`tests/jobs/test_archive_source.py`).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from ops.backfill.plan import BackfillRequest, batch_budget
from ops.cli import _bytes_argument
from ops.driver.backfill import PlannedPartition, batch_heap, feed_batches
from ops.spec.job import find_job
from ops.spec.platform import BackfillConfig, PlatformConfig
from tests.support.drivers import edit_job

HOUR = datetime(2026, 11, 20, 6, tzinfo=UTC)
MIB = 1 << 20


def hours(*sizes: dict[str, list[int]]) -> tuple[list[PlannedPartition], dict[int, dict[str, list[int]]]]:
    """Partitions with these file sizes by input (files named `<input><hour>-<n>`), and the sizes."""
    partitions = [
        PlannedPartition(
            index,
            HOUR + timedelta(hours=index),
            {name: [f"{name}{index}-{n}" for n in range(len(files))] for name, files in by_input.items()},
            sum(map(sum, by_input.values())),
        )
        for index, by_input in enumerate(sizes)
    ]
    return partitions, dict(enumerate(sizes))


def shape(batches: tuple[object, ...]) -> list[list[tuple[int, int, int]]]:
    return [[(p.partition, p.part, p.parts) for p in batch.pieces] for batch in batches]  # type: ignore[attr-defined]


def test_consecutive_hours_fill_a_batch_up_to_the_budget_every_input_in_step() -> None:
    partitions, sizes = hours(
        {"web": [30], "app": [10]},
        {"web": [20], "app": []},
        {"web": [30], "app": [30]},
        {"web": [5], "app": [5]},
    )

    batches = feed_batches(partitions, sizes, budget=70)

    # 40 + 20 fit 70; 60 would not fit after them; the last hour's 10 fits after the 60.
    assert shape(batches) == [[(0, 1, 1), (1, 1, 1)], [(2, 1, 1), (3, 1, 1)]]
    assert [batch.bytes for batch in batches] == [60, 70]
    assert [batch.completes for batch in batches] == [[0, 1], [2, 3]]
    assert batches[0].describe(partitions) == "2026-11-20 06:00 .. 2026-11-20 07:00 (2 hours)"
    # An idle input reads nothing that hour, and the batch still holds both inputs' files.
    assert batches[0].pieces[1].files == {"web": ["web1-0"], "app": []}
    # A range within the budget is one batch.
    assert shape(feed_batches(partitions, sizes, budget=1000)) == [[(h, 1, 1) for h in range(4)]]
    # An hour of empty files opens a range as well as any.
    empty, empty_sizes = hours({"web": [0], "app": []}, {"web": [5], "app": [5]})
    assert shape(feed_batches(empty, empty_sizes, budget=10)) == [[(0, 1, 1), (1, 1, 1)]]


def test_an_hour_over_the_budget_goes_alone_in_slices_of_its_files_each_input_cut_at_the_same_point() -> None:
    partitions, sizes = hours(
        {"web": [10], "app": [10]},
        {"web": [25, 25, 25, 25], "app": [20, 20]},  # 140 bytes
        {"web": [10], "app": [10]},
    )

    batches = feed_batches(partitions, sizes, budget=75)

    assert shape(batches) == [[(0, 1, 1)], [(1, 1, 2)], [(1, 2, 2)], [(2, 1, 1)]]
    assert [batch.pieces[0].files for batch in batches[1:3]] == [
        {"web": ["web1-0", "web1-1"], "app": ["app1-0"]},
        {"web": ["web1-2", "web1-3"], "app": ["app1-1"]},
    ]
    assert [batch.bytes for batch in batches] == [20, 70, 70, 20]
    assert [batch.completes for batch in batches] == [[0], [], [1], [2]]
    assert batches[2].describe(partitions) == "2026-11-20 07:00 slice 2/2"


def test_a_file_larger_than_the_budget_is_a_slice_of_its_own() -> None:
    partitions, sizes = hours({"web": [100, 10, 10], "app": [5]})

    batches = feed_batches(partitions, sizes, budget=30)

    # The 100-byte file cannot be cut: it goes with the other input's file of its slice, over the
    # budget; the rest of the hour is the next slice.
    assert shape(batches) == [[(0, 1, 2)], [(0, 2, 2)]]
    assert [batch.pieces[0].files for batch in batches] == [
        {"web": ["web0-0"], "app": ["app0-0"]},
        {"web": ["web0-1", "web0-2"], "app": []},
    ]
    assert [batch.bytes for batch in batches] == [105, 20]


def test_the_budget_is_the_runs_the_platforms_or_a_quarter_of_the_jobs_task_memory(
    platform_conf: PlatformConfig,
) -> None:
    router = find_job("router", platform_conf.conf_dir)
    request = BackfillRequest("router", end=HOUR)

    # Local mode: the driver's memory (1g) holds the tasks.
    assert batch_budget(platform_conf, router, request) == 256 * MIB
    edit_job(
        platform_conf, "router", lambda spec: spec["operations"].update(resources={"driver_memory": "2g"})
    )
    assert batch_budget(platform_conf, find_job("router", platform_conf.conf_dir), request) == 512 * MIB
    # On a cluster: an executor's.
    edit_job(
        platform_conf,
        "router",
        lambda spec: spec["operations"].update(
            resources={"master": "spark://127.0.0.1:7077", "executor_memory": "512m"}
        ),
    )
    assert batch_budget(platform_conf, find_job("router", platform_conf.conf_dir), request) == 128 * MIB
    configured = platform_conf.model_copy(update={"backfill": BackfillConfig(max_batch_bytes=64 * MIB)})
    assert batch_budget(configured, router, request) == 64 * MIB
    assert batch_budget(configured, router, BackfillRequest("router", end=HOUR, max_batch_bytes=1000)) == 1000


def test_the_heap_is_four_times_the_budget_within_sparks_least_and_the_jobs_memory() -> None:
    # The default budget (a quarter of 1g) runs in the job's whole memory, a smaller one in less.
    assert batch_heap(256 * MIB, "1g") == "1024m"
    assert batch_heap(160 * MIB, "1g") == "640m"
    # A budget of a byte (a batch per file) still starts Spark; a large one stays in the job's memory.
    assert batch_heap(1, "1g") == batch_heap(100 * MIB, "1g") == "512m"
    assert batch_heap(1 << 30, "1536m") == "1536m"


def test_the_cli_takes_a_byte_count_plain_or_with_a_unit() -> None:
    assert [_bytes_argument(text) for text in ("1000", "64m", "1g", "512K")] == [
        1000,
        64 * MIB,
        1 << 30,
        512 << 10,
    ]
    for bad in ("", "0", "lots", "12x", "-5m"):
        with pytest.raises(argparse.ArgumentTypeError, match="byte count"):
            _bytes_argument(bad)
