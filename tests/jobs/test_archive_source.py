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
from ops.driver.backfill import BackfillPlan, BackfillRun, PlannedPartition, feed_batches

HOUR = datetime(2026, 11, 20, 6, tzinfo=UTC)
INPUTS = ("web_events", "app_events")


def planned_run(root: Path, contents: list[dict[str, list[bytes]]], budget: int = 1) -> BackfillRun:
    """A run directory whose partition i stages `contents[i]` (input -> its files' bytes), fed in
    batches of at most `budget` bytes (by default one partition, or one file of each input, each)."""
    run = BackfillRun(root)
    partitions = []
    sizes: dict[int, dict[str, list[int]]] = {}
    for index, by_input in enumerate(contents):
        files: dict[str, list[str]] = {}
        sizes[index] = {}
        for name in INPUTS:
            staged = run.staged(name, index)
            staged.mkdir(parents=True)
            files[name], sizes[index][name] = [], []
            for number, body in enumerate(by_input.get(name, [])):
                (staged / f"{name}-{index}-{number}.json").write_bytes(body)
                files[name].append(f"{name}-{index}-{number}.json")
                sizes[index][name].append(len(body))
        size = sum(map(sum, sizes[index].values()))
        partitions.append(PlannedPartition(index, HOUR + timedelta(hours=index), files, size))
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
            batches=feed_batches(partitions, sizes, budget),
            max_batch_bytes=budget,
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


def test_every_input_moves_by_one_feed_batch_whenever_the_gate_opens(tmp_path: Path) -> None:
    run = planned_run(
        tmp_path,
        [
            {"web_events": [b"w0\nw0b\n"], "app_events": [b"a0\n"]},
            {"web_events": [b"w1\n"]},  # the app was idle that hour
            {"web_events": [b"w2\n"], "app_events": [b"a2\n"]},
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


def test_a_batch_reads_every_hour_the_budget_groups_and_a_slice_of_an_hour_over_it(tmp_path: Path) -> None:
    hour = {"web_events": [b"w\n" * 5], "app_events": [b"a\n" * 5]}  # 20 bytes
    big = {"web_events": [b"x\n" * 5, b"y\n" * 5, b"z\n" * 5], "app_events": [b"b\n" * 5, b"c\n" * 5]}
    run = planned_run(tmp_path, [hour, hour, hour, big], budget=45)
    plan = run.read_plan()

    # Two whole hours fit 45 bytes, the third starts the next batch; the 50-byte hour goes alone,
    # in two slices, each input cut at the same point of its bytes.
    assert [[(p.partition, p.part, p.parts) for p in b.pieces] for b in plan.batches] == [
        [(0, 1, 1), (1, 1, 1)],
        [(2, 1, 1)],
        [(3, 1, 2)],
        [(3, 2, 2)],
    ]
    assert [batch.completes for batch in plan.batches] == [[0, 1], [2], [], [3]]
    assert [batch.bytes for batch in plan.batches] == [40, 20, 30, 20]
    run.set_gate(5, closed=True)
    for name, letters in {"web_events": ["w", "w", "xy", "z"], "app_events": ["a", "a", "b", "c"]}.items():
        reader = ArchiveStreamReader(run, name)
        read = [
            "".join(sorted(set(read_lines(reader, {"next": position}, {"next": position + 1}))))
            for position in range(4)
        ]
        assert read == letters
        assert len(read_lines(reader, {"next": 0}, {"next": 1})) == 10


def test_lines_are_split_and_counted_as_the_text_file_source_does(tmp_path: Path) -> None:
    body = b'{"a": 1}\r\n{"b": "\xc3\xa9"}\r\r\nlast without newline'
    run = planned_run(tmp_path, [{"web_events": [body], "app_events": [b""]}])
    run.set_gate(1, closed=True)
    reader = ArchiveStreamReader(run, "web_events")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())

    assert read_lines(reader, start, end) == ['{"a": 1}', '{"b": "é"}', "", "last without newline"]
    staged = run.staged("web_events", 0) / "web_events-0-0.json"
    assert count_lines(staged) == 4
    assert count_lines(run.staged("app_events", 0) / "app_events-0-0.json") == 0
    # An empty file has nothing to read: the app's batch plans no read task.
    assert ArchiveStreamReader(run, "app_events").partitions(start, end) == []


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
