"""The gated archive source a backfill's query reads (its lockstep contract), on real run directories.

The reader is driven as Spark drives it (`latestOffset` from each input in turn, `partitions`,
`read`), without a query: what a backfill needs from it is that every input moves by exactly one
partition per batch whenever the driver opens the gate, and that it reads the staged lines as the
text file source would. The backfill tests (`tests/ops/test_backfill.py`) run it in the job's query.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from jobs.archive_source import ArchiveStreamReader, count_lines, spread
from ops.driver.backfill import BackfillPlan, BackfillRun, PlannedPartition

HOUR = datetime(2026, 11, 20, 6, tzinfo=UTC)
INPUTS = ("web_events", "app_events")


def planned_run(root: Path, contents: list[dict[str, bytes]]) -> BackfillRun:
    """A run directory whose partition i stages `contents[i]` (input -> one file's bytes)."""
    run = BackfillRun(root)
    partitions = []
    for index, by_input in enumerate(contents):
        files = {}
        for name in INPUTS:
            if name in by_input:
                staged = run.staged(name, index)
                staged.mkdir(parents=True)
                (staged / f"{name}-{index}.json").write_bytes(by_input[name])
                files[name] = [f"{name}-{index}.json"]
            else:
                files[name] = []
        partitions.append(PlannedPartition(index, HOUR + timedelta(hours=index), files, 0))
    run.write_plan(
        BackfillPlan(
            run_id="run",
            job="sessionizer",
            config_version="v",
            candidate=False,
            start=HOUR,
            end=HOUR + timedelta(hours=len(contents)),
            partitions=tuple(partitions),
            sources={name: name for name in INPUTS},
        )
    )
    return run


def read_lines(reader: ArchiveStreamReader, start: dict[str, object], end: dict[str, object]) -> list[str]:
    return [
        value
        for partition in reader.partitions(start, end)
        for batch in reader.read(partition)
        for value in batch.column("value").to_pylist()
    ]


def test_every_input_moves_by_one_partition_per_batch_whenever_the_gate_opens(tmp_path: Path) -> None:
    run = planned_run(
        tmp_path,
        [
            {"web_events": b"w0\nw0b\n", "app_events": b"a0\n"},
            {"web_events": b"w1\n"},  # the app was idle that hour
            {"web_events": b"w2\n", "app_events": b"a2\n"},
        ],
    )
    readers = {name: ArchiveStreamReader(run, name) for name in INPUTS}
    limit = ReadAllAvailable()
    offsets = {name: reader.initialOffset() for name, reader in readers.items()}
    run.set_gate(0)

    batches = []
    for position in range(4):  # three partitions, then the empty closing position
        if position < 3:
            # The gate opens while the first input's latestOffset is already waiting on it: the
            # second input, asked after, must not move further than the first. The last partition
            # is released with the closing position at once, and the gate closed.
            released, closed = (4, True) if position == 2 else (position + 1, False)
            opener = threading.Timer(0.05, run.set_gate, args=(released,), kwargs={"closed": closed})
            opener.start()
        asked = time.monotonic()
        ends = {name: reader.latestOffset(offsets[name], limit) for name, reader in readers.items()}
        if position < 3:
            assert time.monotonic() - asked >= 0.04, "latestOffset answered before the gate opened"
            opener.join()
        assert {end["next"] for end in ends.values()} == {position + 1}
        batches.append({name: read_lines(readers[name], offsets[name], ends[name]) for name in INPUTS})
        offsets = ends

    assert batches == [
        {"web_events": ["w0", "w0b"], "app_events": ["a0"]},
        {"web_events": ["w1"], "app_events": []},
        {"web_events": ["w2"], "app_events": ["a2"]},
        {"web_events": [], "app_events": []},
    ]
    # Closed and fully read: no new data, at once.
    assert all(readers[name].latestOffset(offsets[name], limit) == offsets[name] for name in INPUTS)


def test_lines_are_split_and_counted_as_the_text_file_source_does(tmp_path: Path) -> None:
    body = b'{"a": 1}\r\n{"b": "\xc3\xa9"}\r\r\nlast without newline'
    run = planned_run(tmp_path, [{"web_events": body, "app_events": b""}])
    run.set_gate(1, closed=True)
    reader = ArchiveStreamReader(run, "web_events")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())

    assert read_lines(reader, start, end) == ['{"a": 1}', '{"b": "é"}', "", "last without newline"]
    staged = run.staged("web_events", 0) / "web_events-0.json"
    assert count_lines(staged) == 4
    assert count_lines(run.staged("app_events", 0) / "app_events-0.json") == 0


def test_a_partitions_files_are_spread_over_the_tasks_by_size(tmp_path: Path) -> None:
    sizes = {"a": 9, "b": 5, "c": 4, "d": 3, "e": 1}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x\n" * size)
    paths = [tmp_path / name for name in sizes]

    groups = spread(paths, 2)

    assert sorted(path.name for group in groups for path in group) == sorted(sizes)
    assert sorted(sum(sizes[path.name] for path in group) for group in groups) == [10, 12]
    assert spread(paths[:1], 4) == [[paths[0]]]
    assert spread([], 2) == []
