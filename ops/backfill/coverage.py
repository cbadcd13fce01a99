"""Which event-time partitions a backfill recomputes whole, and which it would only half replace.

A backfill runs over arrival hours, but the table is partitioned by event time, and an event-time
partition is fed by every arrival hour that holds its events: late events arrive hours or days
after their partition's hour, and a session of the sessionizer gathers events from several hours.
A run over some of those hours recomputes only part of the partition, and publishing that part
would replace the rows the other hours contributed. So a backfill publishes a partition only when
every archived hour that feeds it is in its range.

An arrival hour feeds the partitions within the kind's reach (`PipelineModel.backfill_reach`) of
its files' event times (`ops.event_times`, recorded in the archive's manifests). An hour whose
times cannot be read, or a kind whose reach is unbounded, may feed any partition: then only a
range over the whole archive recomputes a partition whole. Partitions are identified by the start
of their event-time window (an hour, or a day: `event_partition_hours`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from botocore.client import BaseClient

from ops import archive
from ops.driver.event_windows import ANY_WINDOW, Coverage, window_start
from ops.event_times import Span
from ops.spec.job import JobSpec
from ops.spec.platform import PlatformConfig

HOUR = timedelta(hours=1)
# What an arrival hour feeds: the starts of the event windows it may change; None for any window.
Feeds = frozenset[datetime] | None


def spans_feed(spans: list[Span | None] | None, reach: timedelta | None, window_hours: int) -> Feeds:
    """The windows an hour's file spans may change; None (any) for unknown spans or reach."""
    if spans is None or reach is None:
        return None
    windows: set[datetime] = set()
    step = timedelta(hours=window_hours)
    for span in spans:
        if span is None:
            continue
        window, last = window_start(span[0] - reach, window_hours), span[1] + reach
        while window <= last:
            windows.add(window)
            window += step
    return frozenset(windows)


def archive_feeds(
    platform: PlatformConfig, spec: JobSpec, client: BaseClient | None = None
) -> dict[datetime, Feeds]:
    """What every archived arrival hour of the job's inputs feeds, all inputs together."""
    pipeline = spec.pipeline
    reach, window_hours = pipeline.backfill_reach(), pipeline.event_partition_hours
    feeds: dict[datetime, Feeds] = {}
    for source in pipeline.inputs.values():
        time_field = next(f for f in source.fields if f.name == source.event_time_field)
        for partition in archive.partitions(platform, source.path, client):
            spans = archive.event_time_spans(platform, partition, time_field, client)
            fed = spans_feed(spans, reach, window_hours)
            known = feeds.get(partition.hour, frozenset())
            feeds[partition.hour] = None if fed is None or known is None else known | fed
    return feeds


def assess(feeds: Mapping[datetime, Feeds], start: datetime, end: datetime, window_hours: int) -> Coverage:
    """The coverage of the arrival hours [start, end) among the archived hours `feeds` describes."""
    inside = {hour for hour in feeds if start <= hour < end}
    outside = {hour: fed for hour, fed in feeds.items() if hour not in inside}
    if any(feeds[hour] is None for hour in inside):
        from_anywhere = {ANY_WINDOW: tuple(sorted(outside))} if outside else {}
        return Coverage(window_hours, {}, from_anywhere, every_window=True)
    targets = frozenset().union(*(feeds[hour] or () for hour in inside))
    whole: dict[datetime, tuple[datetime, ...]] = {}
    partial: dict[datetime, tuple[datetime, ...]] = {}
    for window in sorted(targets):
        from_outside = tuple(sorted(h for h, fed in outside.items() if fed is None or window in fed))
        if from_outside:
            partial[window] = from_outside
        else:
            whole[window] = tuple(sorted(h for h in inside if window in (feeds[h] or ())))
    return Coverage(window_hours, whole, partial, every_window=False)


def widen(
    feeds: Mapping[datetime, Feeds], start: datetime, end: datetime, window_hours: int
) -> tuple[datetime, datetime]:
    """The smallest range containing [start, end) that recomputes every window it touches whole
    (growing the range may touch windows that other hours feed, so it grows until it is closed)."""
    while True:
        missing = assess(feeds, start, end, window_hours).missing_hours()
        if not missing:
            return start, end
        start, end = min(start, missing[0]), max(end, missing[-1] + HOUR)
