"""The source a backfill's query reads the archive through (its lockstep contract), on real run
directories and a real streaming query.

What a backfill needs from it: every input moves by exactly one feed batch per micro-batch, the
one the driver released, and reads the staged lines as the live job's text file source would.
The backfill tests (`tests/ops/test_backfill.py`) run it in the job's own query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.archive_source import count_lines, read_archive
from ops.driver.backfill import BackfillPlan, BackfillRun, PlannedPartition, feed_batches
from tests.support.spark import session_confs

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


@pytest.fixture
def feed_session(spark: SparkSession) -> Iterator[SparkSession]:
    """The worker's session, its confs as they were after the test (a `FeedQuery` turns no-data
    batches off, as the backfill does)."""
    with session_confs(spark, {}):
        yield spark


class FeedQuery:
    """A streaming query over every input of a run, as the backfill's (the first feed batch
    released before it starts, no no-data batches), collecting each micro-batch's lines by input."""

    def __init__(self, spark: SparkSession, run: BackfillRun, checkpoint: Path) -> None:
        self.batches: list[dict[str, list[str]]] = []
        run.release(run.read_plan().batches[0], INPUTS)
        spec = SimpleNamespace(pipeline=SimpleNamespace(inputs=dict.fromkeys(INPUTS)))
        raw = read_archive(run)(spark, None, spec)  # type: ignore[arg-type]
        web, app = (frame.withColumn("input", F.lit(name)) for name, frame in raw.items())
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        self.query = (
            web.unionByName(app)
            .writeStream.foreachBatch(self._collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def _collect(self, frame: DataFrame, _batch_id: int) -> None:
        rows = frame.collect()
        self.batches.append({name: sorted(row.value for row in rows if row.input == name) for name in INPUTS})

    def next(self, release: Callable[[], None] = lambda: None) -> dict[str, list[str]]:
        """Run `release`, then the lines of the micro-batch that follows."""
        seen = len(self.batches)
        release()
        while len(self.batches) == seen:
            assert self.query.exception() is None
            self.query.awaitTermination(0.05)
        return self.batches[seen]


def feed_all(spark: SparkSession, run: BackfillRun, checkpoint: Path) -> list[dict[str, list[str]]]:
    """Every feed batch of `run` and the closing position through a `FeedQuery`, as the backfill
    feeds them: the micro-batches' lines."""
    plan = run.read_plan()
    feed = FeedQuery(spark, run, checkpoint)
    try:
        seen = [feed.next()]
        for batch in plan.batches[1:]:
            run.withdraw(batch.index - 1)
            seen.append(feed.next(lambda batch=batch: run.release(batch, INPUTS)))
        seen.append(feed.next(lambda: run.release_closing(INPUTS)))
        # A batch released again (as a killed attempt's stays) is nothing new: no micro-batch.
        run.release(plan.batches[-1], INPUTS)
        feed.query.awaitTermination(1)
        assert len(feed.batches) == len(plan.batches) + 1
    finally:
        feed.query.stop()
    return seen


def test_every_input_moves_by_exactly_the_feed_batch_released(
    feed_session: SparkSession, tmp_path: Path
) -> None:
    run = planned_run(
        tmp_path / "run",
        [
            {"web_events": [b"w0\nw0b\n"], "app_events": [b"a0\n"]},
            {"web_events": [b"w1\n"]},  # the app was idle that hour
            {"web_events": [b"w2\n"], "app_events": [b"a2\n"]},
        ],
    )

    assert feed_all(feed_session, run, tmp_path / "checkpoint") == [
        {"web_events": ["w0", "w0b"], "app_events": ["a0"]},
        {"web_events": ["w1"], "app_events": []},
        {"web_events": ["w2"], "app_events": ["a2"]},
        {"web_events": [], "app_events": []},
    ]


def test_a_release_shows_a_batch_whole_in_one_rename_and_a_killed_attempts_stays(tmp_path: Path) -> None:
    run = planned_run(tmp_path, [{"web_events": [b"w\n", b"v\n"], "app_events": [b"a\n"]}], budget=100)
    batch = run.read_plan().batches[0]
    # A killed attempt left a half-made directory outside the source's path: made again.
    (run.root / "releasing" / "batch=00000" / "input=web_events").mkdir(parents=True)

    run.release(batch, INPUTS)

    released = run.released(0)
    assert sorted(str(path.relative_to(released)) for path in released.rglob("*.json")) == [
        "input=app_events/00000-app_events-0-0.json",
        "input=web_events/00000-web_events-0-0.json",
        "input=web_events/00000-web_events-0-1.json",
    ]
    assert not (run.root / "releasing" / "batch=00000").exists()
    # Hard links of the staged files: nothing copied.
    staged = run.staged("web_events", 0) / "web_events-0-0.json"
    assert (released / "input=web_events" / "00000-web_events-0-0.json").stat().st_ino == staged.stat().st_ino
    run.release(batch, INPUTS)  # again: stays
    # Committed: its files go at once, its directories (which a listing must not lose under it)
    # once no query reads the feed.
    run.withdraw(0)
    assert not list(released.rglob("*.json")) and released.is_dir() and staged.is_file()
    run.prune_feed()
    assert not released.exists()
    # A position without a file (the closing one) gets an empty one: the source runs a
    # micro-batch only for a new file.
    run.release_closing(INPUTS)
    assert [path.stat().st_size for path in run.released(1).rglob("*.json")] == [0]


def test_a_batch_reads_every_hour_the_budget_groups_and_a_slice_of_an_hour_over_it(
    feed_session: SparkSession, tmp_path: Path
) -> None:
    hour = {"web_events": [b"w\n" * 5], "app_events": [b"a\n" * 5]}  # 20 bytes
    big = {"web_events": [b"x\n" * 5, b"y\n" * 5, b"z\n" * 5], "app_events": [b"b\n" * 5, b"c\n" * 5]}
    run = planned_run(tmp_path / "run", [hour, hour, hour, big], budget=45)
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
    seen = feed_all(feed_session, run, tmp_path / "checkpoint")
    assert [{name: "".join(sorted(set(lines))) for name, lines in batch.items()} for batch in seen] == [
        {"web_events": "w", "app_events": "a"},
        {"web_events": "w", "app_events": "a"},
        {"web_events": "xy", "app_events": "b"},
        {"web_events": "z", "app_events": "c"},
        {"web_events": "", "app_events": ""},
    ]
    assert [len(batch["web_events"]) for batch in seen] == [10, 5, 10, 5, 0]


def test_lines_are_split_and_counted_as_the_text_file_source_does(
    feed_session: SparkSession, tmp_path: Path
) -> None:
    body = b'{"a": 1}\r\n{"b": "\xc3\xa9"}\r\r\nlast without newline'
    run = planned_run(tmp_path / "run", [{"web_events": [body], "app_events": [b""]}])
    feed = FeedQuery(feed_session, run, tmp_path / "checkpoint")
    try:
        lines = feed.next()
    finally:
        feed.query.stop()

    assert lines == {
        "web_events": sorted(['{"a": 1}', '{"b": "é"}', "", "last without newline"]),
        "app_events": [],
    }
    assert count_lines(run.staged("web_events", 0) / "web_events-0-0.json") == 4
    assert count_lines(run.staged("app_events", 0) / "app_events-0-0.json") == 0
