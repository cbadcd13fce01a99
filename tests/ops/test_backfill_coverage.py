"""Which event-time partitions a backfill range recomputes whole (`ops.backfill.coverage`), and the
event-time spans the archive records for it (`ops.event_times`), on the sequences that lost rows:
a sessionizer day fed by arrival hours 04..16 and backfilled over 05..09 and 04..07, and router
hours fed again by late arrivals."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ops.backfill.coverage import Feeds, assess, spans_feed, widen
from ops.driver.event_windows import Coverage
from ops.event_times import file_spans, readable, time_key
from ops.exceptions import RecoveryOpenError
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.pipelines import SourceField
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from ops.warehouse import writers
from ops.warehouse.writers import SKIPPED_ACTION, table_writer

DAY = datetime(2026, 11, 20, tzinfo=UTC)
SESSION_REACH = timedelta(minutes=240 + 30)


def hour(n: int) -> datetime:
    return DAY + timedelta(hours=n)


def sessionizer_day() -> dict[datetime, Feeds]:
    """Arrival hours 04..16 of a day, each holding that hour's events: all feed the day's window."""
    return {
        hour(n): spans_feed(
            [(hour(n) + timedelta(minutes=1), hour(n) + timedelta(minutes=59))], SESSION_REACH, 24
        )
        for n in range(4, 17)
    }


def test_a_range_over_part_of_a_days_arrival_hours_covers_it_in_part_and_widens_to_all_of_them() -> None:
    feeds = sessionizer_day()
    whole = assess(feeds, hour(4), hour(17), 24)
    # A session of hour 04's events may have begun the evening before (the sessionizer's reach).
    assert whole.partial == {} and list(whole.whole) == [DAY - timedelta(days=1), DAY]
    assert whole.whole[DAY] == tuple(hour(n) for n in range(4, 17))

    refusals = {
        (5, 10): "REFUSED event_date=2026-11-20: also fed by arrival hours 2026-11-20T04:00 .. "
        "2026-11-20T16:00 (8 hours), outside the range",
        (4, 8): "REFUSED event_date=2026-11-20: also fed by arrival hours 2026-11-20T08:00 .. "
        "2026-11-20T16:00 (9 hours), outside the range",
    }
    for (start, end), refusal in refusals.items():
        part = assess(feeds, hour(start), hour(end), 24)
        assert list(part.partial) == [DAY]
        assert part.partial[DAY] == tuple(hour(n) for n in range(4, 17) if not start <= n < end)
        assert not part.is_whole(DAY)
        assert widen(feeds, hour(start), hour(end), 24) == (hour(4), hour(17))
        assert [line.strip() for line in part.lines() if "REFUSED" in line] == [refusal]


def test_late_router_arrivals_make_an_earlier_arrival_hours_event_hours_partial() -> None:
    # Arrival hour 0 holds events of event hours 10 and 11; hour 1 of 11; hour 2 is late data of hour 10.
    spans = {
        hour(0): [(hour(10) + timedelta(minutes=5), hour(11) + timedelta(minutes=3))],
        hour(1): [(hour(11) + timedelta(minutes=10), hour(11) + timedelta(minutes=50))],
        hour(2): [(hour(10) + timedelta(minutes=30), hour(10) + timedelta(minutes=31)), None],
    }
    feeds = {arrival: spans_feed(found, timedelta(0), 1) for arrival, found in spans.items()}

    coverage = assess(feeds, hour(0), hour(1), 1)

    assert coverage.partial == {hour(10): (hour(2),), hour(11): (hour(1),)}
    assert widen(feeds, hour(0), hour(1), 1) == (hour(0), hour(3))
    # Hour 1 alone writes event hour 11 only, which hour 0 feeds too; hour 2 alone: hour 10, fed by hour 0.
    assert assess(feeds, hour(1), hour(3), 1).partial == {hour(11): (hour(0),), hour(10): (hour(0),)}
    assert assess(feeds, hour(0), hour(3), 1).partial == {}


def test_an_hour_whose_times_cannot_be_read_may_feed_any_window_so_only_the_whole_archive_is_whole() -> None:
    feeds = sessionizer_day()
    feeds[hour(20)] = spans_feed(None, SESSION_REACH, 24)
    assert assess(feeds, hour(4), hour(17), 24).partial == {
        DAY - timedelta(days=1): (hour(20),),
        DAY: (hour(20),),
    }
    unread = assess(feeds, hour(20), hour(21), 24)
    assert unread.every_window and not unread.is_whole(DAY)
    everything = assess(feeds, hour(0), hour(24), 24)
    assert everything.every_window and everything.partial == {} and everything.is_whole(DAY)
    assert widen(feeds, hour(20), hour(21), 24) == (hour(4), hour(21))


def test_a_python_job_declaring_its_reach_gets_whole_partitions_and_one_that_does_not_never() -> None:
    warehouse = find_job("warehouse_writer", DEFAULT_CONF_DIR).pipeline
    undeclared = warehouse.model_copy(update={"backfill_reach_minutes": None})
    spans = [(hour(10) + timedelta(minutes=5), hour(10) + timedelta(minutes=50))]

    declared = {hour(0): spans_feed(spans, warehouse.backfill_reach(), 1)}
    unknown = {hour(0): spans_feed(spans, undeclared.backfill_reach(), 1)}

    assert assess(declared, hour(0), hour(1), 1).is_whole(hour(10))
    # With no reach known, an arrival hour's events may change any partition.
    assert undeclared.backfill_reach() is None
    assert assess(unknown, hour(0), hour(1), 1).every_window


def test_a_coverage_survives_the_plan_file_and_names_a_partitions_window_by_its_values() -> None:
    coverage = assess(sessionizer_day(), hour(5), hour(10), 24)
    assert Coverage.from_json(json.loads(json.dumps(coverage.as_json()))) == coverage
    assert coverage.window_of({"output": "sessions", "event_date": "2026-11-20"}) == DAY
    assert coverage.window_of({"output": "dead_letter", "event_date": "__HIVE_DEFAULT_PARTITION__"}) is None
    hourly = assess({hour(0): frozenset({hour(7)})}, hour(0), hour(1), 1)
    assert hourly.window_of({"route": "a", "event_date": "2026-11-20", "event_hour": "7"}) == hour(7)
    assert hourly.is_whole(hour(7)) and not hourly.is_whole(hour(8))


def test_a_files_span_counts_every_readable_time_and_nothing_else(tmp_path: Path) -> None:
    iso = SourceField(name="event_time", type="timestamp")
    nested = SourceField(name="at", type="timestamp", path="meta.at", format="epoch_millis")
    pattern = SourceField(name="t", type="timestamp", format="dd/MM/yyyy HH:mm:ss")
    lines = [
        b'{"event_time": "2026-11-20T10:00:00Z", "meta": {"at": 1795168800000}}',
        b"\xef\xbb\xbf" + b'{"event_time": "2026-11-20T09:30:00+01:00"}',  # a BOM, as Windows writes
        b'{"event_time": "2026-11-20 11:15:00"}',  # no offset: UTC, the session time zone
        b"{not json",
        b'{"event_time": "yesterday", "meta": {"at": "soon"}}',
        b"[" * 5000 + b"]" * 5000,  # nested past the parser's limit
        b"",
    ]
    path = tmp_path / "events.json"
    path.write_bytes(b"\n".join(lines))

    spans = file_spans(path, [iso, nested, pattern])

    assert not readable(pattern) and time_key(pattern) not in spans
    assert spans[time_key(iso)] == ["2026-11-20T08:30:00+00:00", "2026-11-20T11:15:00+00:00"]
    assert spans[time_key(nested)] == ["2026-11-20T10:00:00+00:00", "2026-11-20T10:00:00+00:00"]
    path.write_text('{"other": 1}\n')
    assert file_spans(path, [iso]) == {time_key(iso): None}


def test_a_table_writer_waits_for_an_open_restate_and_skips_the_job_with_a_decision_if_it_stays_open(
    platform_conf: PlatformConfig, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writers, "POLL_SECONDS", 0.05)
    ledger.ensure_job("router", desired_state="running", state="RUNNING", config_version="v1")
    decision = ledger.record_decision("router", "restate", "a bad deploy", {})
    operation = ledger.start_operation("router", "restate", "a bad deploy", decision, "replay")

    with (
        pytest.raises(RecoveryOpenError, match=r"compaction of 'router' skipped: its restate \(step replay"),
        table_writer(platform_conf, ledger, "router", "compaction", recovery_wait=0.3, lock_timeout=5),
    ):
        pytest.fail("the table was written while a restate was open")
    [skipped] = ledger.decisions("router", action=SKIPPED_ACTION)
    assert skipped.outcome is not None and skipped.outcome.startswith("skipped: compaction of 'router'")

    # A writer that starts while the restate is open runs once it ends.
    threading.Timer(0.3, ledger.finish_operation, (operation.id, "restated")).start()
    began = time.monotonic()
    with table_writer(platform_conf, ledger, "router", "compaction", recovery_wait=30, lock_timeout=5):
        assert ledger.operation("router") is None
        waited = time.monotonic() - began
    assert waited >= 0.25
    assert len(ledger.decisions("router", action=SKIPPED_ACTION)) == 1
