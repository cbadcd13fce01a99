"""Deterministic synthetic inputs, one scenario per job the platform ships (`conf/jobs/`), for
tests, benchmarks and the demo. "Kind" below is the shipped job's pipeline.

A scenario writes `n_events` events (in a few atomic files) under a landing root, into the
landing directories of that kind's sources, and returns the files it wrote. The same arguments
always write the same files. Scenarios never write an event later than the kind's allowed
lateness, so the streaming and the batch runner agree on them row for row; tests that need late,
duplicate or out-of-order events write them by hand.

A kind whose sink has a `late` output also has a `late` writer: a few well-formed events a day
before the scenario's first event, in a file of their own. Written after a stream has run over
the scenario, every one of them is behind its watermark, so the stream sends each to `late` and
nothing else changes: the stream's other rows are still the batch rows of the scenario's files.

A stateful kind also has a `flush`: one event per source, far later than any scenario event, so
the watermark passes every session, window or join interval the scenario opened and the streaming
run emits everything the batch run computes from the scenario's files. The flush events' own
results stay open in the stream, which is why the batch side is computed without them.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ops.atomic import replacing
from synthetic.generator import DEFAULT_START, MALFORMED_KINDS, break_event, make_event, write_batch

FILES_PER_SCENARIO = 3


@dataclass(frozen=True)
class Scenario:
    """How to write a kind's synthetic input, and for stateful kinds how to close its state."""

    # (landing_root, n_events, seed) -> the files written.
    write: Callable[[Path, int, int], list[Path]]
    # landing_root -> the files written.
    flush: Callable[[Path], list[Path]] | None = None
    # For an input of several writes (benchmarks): (landing_root, n_events, seed, start) writes the
    # scenario from event time `start`; writes started `period` apart are in event-time order (the
    # first write's last event is before the next one's first), so none of them is late.
    write_from: Callable[[Path, int, int, datetime], list[Path]] | None = None
    period: timedelta | None = None
    # (lake_root, seed) -> the side inputs the kind reads from the lake (e.g. a lookup table).
    lake: Callable[[Path, int], list[Path]] | None = None
    # For a kind with a `late` output: (landing_root, seed) -> the ids of the late events written.
    late: Callable[[Path, int], list[str]] | None = None
    # A SQL expression over the sink's columns naming the event of a `late` row (or, when it is
    # an array, its events).
    late_id_column: str = "event_id"


def router_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Product events with 5 % malformed lines, in `events/`."""
    per_file = max(1, n_events // FILES_PER_SCENARIO)
    return [
        write_batch(landing_root / "events", per_file, 0.05, seed * 1000 + i).path
        for i in range(FILES_PER_SCENARIO)
    ]


# The impressions_plays job's allowed lateness (conf/jobs/impressions_plays.yaml); its scenario
# delays arrivals by at most half of it.
IMPRESSIONS_PLAYS_LATENESS = timedelta(seconds=600)
IMPRESSIONS_PLAYS_START = datetime(2025, 1, 1, tzinfo=UTC)


def _event_time_text(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# A flush event comes this long after its scenario's start: far past every scenario event and the
# allowed lateness, so the watermark passes them all and closes every window and session.
FLUSH_AFTER = timedelta(days=30)


def _flush_file(landing_dir: Path, file_name: str, start: datetime, fields: Mapping[str, str]) -> Path:
    """A landing file of one event of `fields`, `FLUSH_AFTER` after a scenario starting at `start`."""
    event = {**fields, "event_time": _event_time_text(start + FLUSH_AFTER)}
    return write_json_lines(landing_dir, file_name, [json.dumps(event)])


def write_json_lines(landing_dir: Path, file_name: str, lines: list[str], age_seconds: float = 0.0) -> Path:
    """One landing file written atomically, its modification time `age_seconds` in the past.

    The file source reads the oldest files first, so ages order the files of one scenario.
    """
    path = landing_dir / file_name
    with replacing(path) as temp_path:
        temp_path.write_text("".join(line + "\n" for line in lines))
        modified = time.time() - age_seconds
        os.utime(temp_path, (modified, modified))
    return path


# How far before a scenario's first event its late events are: behind any watermark the scenario
# leaves, and before every window, session or match it opens.
LATE_BEFORE = timedelta(days=1)
LATE_EVENTS = 24


def _write_late(landing_dir: Path, file_name: str, events: list[dict[str, object]]) -> list[str]:
    """Well-formed `events` as one landing file (the newest); returns their event ids."""
    write_json_lines(landing_dir, file_name, [json.dumps(event) for event in events])
    return [str(event["event_id"]) for event in events]


def _broken(rng: random.Random, event: dict[str, object], id_field: str) -> str:
    """A malformed copy of `event`: truncated JSON, an unparsable event time, or no id."""
    kind = rng.randrange(3)
    if kind == 0:
        line = json.dumps(event)
        return line[: len(line) // 2]
    if kind == 1:
        return json.dumps({**event, "event_time": "yesterday"})
    return json.dumps({k: v for k, v in event.items() if k != id_field})


def impressions_plays_scenario(
    landing_root: Path, n_events: int, seed: int, start: datetime = IMPRESSIONS_PLAYS_START
) -> list[Path]:
    """Impressions and plays of 40 profiles x 12 titles over ~5.5 h from `start`, in `impressions/`, `plays/`.

    About half of the impressions get a play of the same profile and title 0-90 minutes later (so
    some convert and some miss the hour); the rest of the `n_events` are plays with no impression.
    3 % of the lines are malformed, 2 % of the events are resent (an exact copy in the same file).
    Each event arrives 0-5 minutes after its event time (out of order, within the lateness), and
    each source's lines are split by arrival into FILES_PER_SCENARIO files, oldest first.
    """
    rng = random.Random(seed)
    n_impressions = max(1, n_events * 2 // 3)
    impressions: list[dict[str, object]] = []
    plays: list[dict[str, object]] = []
    times: dict[str, datetime] = {}
    for i in range(n_impressions):
        moment = start + timedelta(seconds=4 * 3600 * i / n_impressions)
        profile, title = f"p{rng.randrange(40):02d}", f"t{rng.randrange(12):02d}"
        impression_id = f"i-{seed}-{i:05d}"
        impressions.append(
            {"impression_id": impression_id, "profile_id": profile, "title_id": title, "row_position": i % 7}
        )
        times[impression_id] = moment
        if rng.random() < 0.5 and len(impressions) + len(plays) < n_events:
            play_id = f"q-{seed}-{len(plays):05d}"
            plays.append({"play_id": play_id, "profile_id": profile, "title_id": title, "device": "tv"})
            times[play_id] = moment + timedelta(seconds=rng.randrange(0, 5400))
    while len(impressions) + len(plays) < n_events:
        play_id = f"q-{seed}-{len(plays):05d}"
        plays.append(
            {
                "play_id": play_id,
                "profile_id": f"p{rng.randrange(40):02d}",
                "title_id": f"t{rng.randrange(12):02d}",
            }
        )
        times[play_id] = start + timedelta(seconds=rng.randrange(0, 5 * 3600))
    max_delay = IMPRESSIONS_PLAYS_LATENESS.total_seconds() / 2
    written: list[Path] = []
    for source, id_field, events in (
        ("impressions", "impression_id", impressions),
        ("plays", "play_id", plays),
    ):
        arrivals: list[tuple[datetime, list[str]]] = []
        for event in events:
            moment = times[str(event[id_field])]
            event = {**event, "event_time": _event_time_text(moment)}
            roll = rng.random()
            if roll < 0.03:
                lines = [_broken(rng, event, id_field)]
            elif roll < 0.05:
                lines = [json.dumps(event)] * 2
            else:
                lines = [json.dumps(event)]
            arrivals.append((moment + timedelta(seconds=rng.uniform(0, max_delay)), lines))
        arrivals.sort(key=lambda arrival: arrival[0])
        per_file = -(-len(arrivals) // FILES_PER_SCENARIO)
        for k in range(FILES_PER_SCENARIO):
            chunk = [line for _, lines in arrivals[k * per_file : (k + 1) * per_file] for line in lines]
            # Shuffled within the file: order inside a micro-batch does not matter to the watermark.
            rng.shuffle(chunk)
            age = 10.0 * (FILES_PER_SCENARIO - k)
            written.append(write_json_lines(landing_root / source, f"{source}-{seed}-{k}.json", chunk, age))
    return written


def impressions_plays_late(landing_root: Path, seed: int) -> list[str]:
    """Impressions and plays of one profile and title a day before the scenario (they would join)."""
    ids = []
    for source, id_field, prefix in (("impressions", "impression_id", "i"), ("plays", "play_id", "q")):
        events = [
            {
                id_field: f"{prefix}-{seed}-late-{i}",
                "profile_id": "p00",
                "title_id": "t00",
                "event_time": _event_time_text(IMPRESSIONS_PLAYS_START - LATE_BEFORE + timedelta(minutes=i)),
            }
            for i in range(LATE_EVENTS // 2)
        ]
        write_json_lines(landing_root / source, f"{source}-{seed}-late.json", [json.dumps(e) for e in events])
        ids += [str(event[id_field]) for event in events]
    return ids


def impressions_plays_flush(landing_root: Path) -> list[Path]:
    """An impression and a play 30 days later, of different profiles (so they join nothing)."""
    return [
        _flush_file(
            landing_root / "impressions",
            "impressions-flush.json",
            IMPRESSIONS_PLAYS_START,
            {"impression_id": "i-flush", "profile_id": "flush-i", "title_id": "t"},
        ),
        _flush_file(
            landing_root / "plays",
            "plays-flush.json",
            IMPRESSIONS_PLAYS_START,
            {"play_id": "q-flush", "profile_id": "flush-q", "title_id": "t"},
        ),
    ]


# The sessionizer scenario's sources (conf/jobs/sessionizer.yaml) and its shape.
SESSION_SOURCES = ("web_events", "app_events")
SESSION_USERS = 40
SESSION_FILE_MINUTES = 60
SESSION_JITTER_MINUTES = 5
BOT_USER = "bot00001"


def sessionizer_scenario(
    landing_root: Path,
    n_events: int,
    seed: int,
    start: datetime = DEFAULT_START,
    users: int = SESSION_USERS,
) -> list[Path]:
    """Web and app events of `users` users over 3 hours from `start`: a bot, duplicates, malformed lines.

    Each source gets `FILES_PER_SCENARIO` files of one hour each, in time order; within a file
    event times jitter by up to 5 minutes (out of order, well within the sessionizer's lateness).
    About 3 % of the lines repeat an earlier event of the same file (a duplicate event id) and 2 %
    are malformed. The bot sends one web event a minute for the whole scenario, so its sessions
    are cut by `max_session_minutes`, never by the gap. Each event's user is drawn at random: with
    few users for many events (the tests' 40), every user is as busy as the bot and every session
    is cut by the cap; with about one event per user per 15 minutes, most sessions end by the gap.
    """
    paths = []
    per_file = max(1, n_events // (FILES_PER_SCENARIO * len(SESSION_SOURCES)))
    for file_index in range(FILES_PER_SCENARIO):
        file_start = start + timedelta(minutes=SESSION_FILE_MINUTES * file_index)
        for source_index, source in enumerate(SESSION_SOURCES):
            rng = random.Random(seed * 1000 + file_index * 10 + source_index)
            lines: list[str] = []
            for position in range(per_file):
                minutes = SESSION_FILE_MINUTES * position / per_file
                jitter = rng.uniform(-SESSION_JITTER_MINUTES, SESSION_JITTER_MINUTES)
                minutes = min(max(minutes + jitter, 0.0), SESSION_FILE_MINUTES - 0.001)
                event = make_event(rng, file_start + timedelta(minutes=minutes))
                event["user_id"] = f"u{rng.randrange(users):05d}"
                roll = rng.random()
                if roll < 0.02:
                    lines.append(break_event(rng, event, MALFORMED_KINDS[position % 3]).line)
                elif roll < 0.05 and lines:
                    lines.append(rng.choice(lines))
                else:
                    lines.append(json.dumps(event))
            if source == "web_events":
                for minute in range(SESSION_FILE_MINUTES):
                    bot = make_event(rng, file_start + timedelta(minutes=minute))
                    lines.append(json.dumps({**bot, "user_id": BOT_USER}))
            name = f"{source}-{seed}-{file_index:03d}.json"
            paths.append(write_json_lines(landing_root / source, name, lines))
    return paths


def sessionizer_flush(landing_root: Path) -> list[Path]:
    """One event per source 30 days after any scenario event, from a user of its own."""
    moment = DEFAULT_START + FLUSH_AFTER
    paths = []
    for source in SESSION_SOURCES:
        event = {**make_event(random.Random(0), moment), "user_id": f"flush_{source}"}
        paths.append(write_json_lines(landing_root / source, f"{source}-flush.json", [json.dumps(event)]))
    return paths


def sessionizer_late(landing_root: Path, seed: int) -> list[str]:
    """Events of the scenario's users a day before it, half per source."""
    rng = random.Random(seed)
    ids = []
    per_source = LATE_EVENTS // len(SESSION_SOURCES)
    for source_index, source in enumerate(SESSION_SOURCES):
        events: list[dict[str, object]] = []
        for position in range(per_source):
            moment = DEFAULT_START - LATE_BEFORE + timedelta(minutes=position + 60 * source_index)
            events.append({**make_event(rng, moment), "user_id": f"u{rng.randrange(SESSION_USERS):05d}"})
        ids += _write_late(landing_root / source, f"{source}-{seed}-late.json", events)
    return ids


# The hour before midnight, so the scenario spans two event dates.
WAREHOUSE_START = datetime(2024, 12, 31, 23, tzinfo=UTC)


def warehouse_writer_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Product events with 5 % malformed lines in `events/`, over the 3 hours around a midnight."""
    per_file = max(1, n_events // FILES_PER_SCENARIO)
    return [
        write_batch(
            landing_root / "events",
            per_file,
            0.05,
            seed * 1000 + i,
            start=WAREHOUSE_START + timedelta(hours=i),
            span_seconds=3600.0,
            file_name=f"warehouse-{seed}-{i}.json",
        ).path
        for i in range(FILES_PER_SCENARIO)
    ]


def _files_by_arrival(
    rng: random.Random,
    landing_dir: Path,
    prefix: str,
    timed_events: list[tuple[datetime, dict[str, object]]],
    max_delay: timedelta,
    id_field: str,
) -> list[Path]:
    """Events arriving 0..`max_delay` after their event time, in FILES_PER_SCENARIO files by arrival.

    3 % of the lines are malformed (truncated JSON or no id) and 2 % of the events are sent twice
    in the same file. Since a file holds only events that arrived after every event of the files
    before it, and the delay is below the allowed lateness, no event is older than the watermark.
    """
    arrivals: list[tuple[datetime, list[str]]] = []
    for moment, fields in timed_events:
        event = {**fields, "event_time": _event_time_text(moment)}
        roll = rng.random()
        if roll < 0.015:
            line = json.dumps(event)
            lines = [line[: len(line) // 2]]
        elif roll < 0.03:
            lines = [json.dumps({k: v for k, v in event.items() if k != id_field})]
        elif roll < 0.05:
            lines = [json.dumps(event)] * 2
        else:
            lines = [json.dumps(event)]
        arrivals.append((moment + rng.uniform(0, 1) * max_delay, lines))
    arrivals.sort(key=lambda arrival: arrival[0])
    per_file = -(-len(arrivals) // FILES_PER_SCENARIO)
    written = []
    for k in range(FILES_PER_SCENARIO):
        chunk = [line for _, lines in arrivals[k * per_file : (k + 1) * per_file] for line in lines]
        rng.shuffle(chunk)
        age = 10.0 * (FILES_PER_SCENARIO - k)
        written.append(write_json_lines(landing_dir, f"{prefix}-{k}.json", chunk, age))
    return written


# conf/jobs/campaign_uniques.yaml's allowed lateness; its scenario delays events by at most half.
CAMPAIGN_UNIQUES_LATENESS = timedelta(seconds=600)
CAMPAIGN_UNIQUES_START = datetime(2025, 1, 1, tzinfo=UTC)


def campaign_uniques_scenario(
    landing_root: Path, n_events: int, seed: int, start: datetime = CAMPAIGN_UNIQUES_START
) -> list[Path]:
    """Engagements of 150 users with 12 campaigns over 6 hours from `start`, in `engagements/`.

    Users engage with a few favourite campaigns, so per-hour uniques and the 24 h distinct
    campaigns per user both vary. Some events sit exactly on an hour boundary.
    """
    rng = random.Random(seed)
    timed: list[tuple[datetime, dict[str, object]]] = []
    for i in range(n_events):
        user = rng.randrange(150)
        campaign = (user + rng.choice((0, 0, 1, 3, 7))) % 12
        offset = timedelta(seconds=6 * 3600 * i / n_events)
        if i % 50 == 0:
            offset = timedelta(hours=int(offset.total_seconds() // 3600))
        event: dict[str, object] = {
            "event_id": f"g-{seed}-{i:05d}",
            "campaign_id": f"c{campaign:02d}",
            "user_id": f"u{user:03d}",
            "event_type": rng.choice(("open", "click", "open", "delivered")),
        }
        timed.append((start + offset, event))
    return _files_by_arrival(
        rng,
        landing_root / "engagements",
        f"engagements-{seed}",
        timed,
        CAMPAIGN_UNIQUES_LATENESS / 2,
        "event_id",
    )


def campaign_uniques_flush(landing_root: Path) -> list[Path]:
    """One engagement 30 days later, of a user and campaign of its own."""
    event = {"event_id": "g-flush", "campaign_id": "c-flush", "user_id": "u-flush"}
    return [
        _flush_file(landing_root / "engagements", "engagements-flush.json", CAMPAIGN_UNIQUES_START, event)
    ]


def campaign_uniques_late(landing_root: Path, seed: int) -> list[str]:
    """Engagements of the scenario's users and campaigns a day before it."""
    rng = random.Random(seed)
    events: list[dict[str, object]] = [
        {
            "event_id": f"g-{seed}-late-{i:03d}",
            "campaign_id": f"c{rng.randrange(12):02d}",
            "user_id": f"u{rng.randrange(150):03d}",
            "event_type": rng.choice(("open", "click")),
            "event_time": _event_time_text(CAMPAIGN_UNIQUES_START - LATE_BEFORE + timedelta(minutes=5 * i)),
        }
        for i in range(LATE_EVENTS)
    ]
    return _write_late(landing_root / "engagements", f"engagements-{seed}-late.json", events)


# conf/jobs/attack_chains.yaml's allowed lateness; its scenario delays events by at most half.
ATTACK_CHAINS_LATENESS = timedelta(seconds=300)
ATTACK_CHAINS_START = datetime(2025, 1, 1, tzinfo=UTC)


def attack_chains_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Security events over 4 hours in `security_events/`: background downloads, execs, logins and
    connections of 10 hosts, 20 users and 20 sources, with injected brute-force bursts (failures
    then a success) and port scans, so every rule matches some keys and misses others."""
    rng = random.Random(seed)
    timed: list[tuple[datetime, dict[str, object]]] = []
    span = 4 * 3600.0

    def add(moment: datetime, **fields: object) -> None:
        timed.append((moment, {"event_id": f"s-{seed}-{len(timed):05d}", **fields}))

    while len(timed) < n_events:
        moment = ATTACK_CHAINS_START + timedelta(seconds=span * len(timed) / n_events)
        roll = rng.random()
        if roll < 0.04:
            user = f"u{rng.randrange(20):02d}"
            for k in range(rng.randrange(3, 8)):
                add(moment + timedelta(seconds=20 * k), event_type="login", user_id=user, outcome="failure")
            add(moment + timedelta(seconds=170), event_type="login", user_id=user, outcome="success")
        elif roll < 0.07:
            source = f"10.0.0.{rng.randrange(20)}"
            for k in range(rng.randrange(6, 14)):
                add(
                    moment + timedelta(seconds=15 * k),
                    event_type="connection",
                    src_ip=source,
                    dst_ip=f"10.1.0.{k}",
                )
        elif roll < 0.45:
            add(moment, event_type=rng.choice(("download", "exec")), host=f"h{rng.randrange(10):02d}")
        elif roll < 0.75:
            add(
                moment,
                event_type="login",
                user_id=f"u{rng.randrange(20):02d}",
                outcome=rng.choice(("failure", "success", "success")),
            )
        else:
            add(
                moment,
                event_type="connection",
                src_ip=f"10.0.0.{rng.randrange(20)}",
                dst_ip=f"10.1.0.{rng.randrange(30)}",
            )
    return _files_by_arrival(
        rng,
        landing_root / "security_events",
        f"security-{seed}",
        timed,
        ATTACK_CHAINS_LATENESS / 2,
        "event_id",
    )


def attack_chains_flush(landing_root: Path) -> list[Path]:
    """One event 30 days later that no rule is interested in."""
    event = {"event_id": "s-flush", "event_type": "heartbeat", "host": "h-flush"}
    return [_flush_file(landing_root / "security_events", "security-flush.json", ATTACK_CHAINS_START, event)]


def attack_chains_late(landing_root: Path, seed: int) -> list[str]:
    """A day before the scenario: downloads, failed logins and connections, each of which one rule
    of conf/jobs/attack_chains.yaml is interested in (so each is one `late` row)."""
    rng = random.Random(seed)
    events: list[dict[str, object]] = []
    for i in range(LATE_EVENTS):
        fields: dict[str, str]
        if i % 3 == 0:
            fields = {"event_type": "download", "host": f"h{rng.randrange(10):02d}"}
        elif i % 3 == 1:
            fields = {"event_type": "login", "user_id": f"u{rng.randrange(20):02d}", "outcome": "failure"}
        else:
            fields = {
                "event_type": "connection",
                "src_ip": "10.0.0.1",
                "dst_ip": f"10.1.0.{rng.randrange(30)}",
            }
        moment = ATTACK_CHAINS_START - LATE_BEFORE + timedelta(seconds=20 * i)
        events.append(
            {"event_id": f"s-{seed}-late-{i:03d}", **fields, "event_time": _event_time_text(moment)}
        )
    return _write_late(landing_root / "security_events", f"security-{seed}-late.json", events)


# Per data point: (GREEN range, RED range) of the values the device_health scenario draws from,
# for the rules of conf/jobs/device_health.yaml; other specs' rules just see other transitions.
DEVICE_READINGS = {
    "signal_db": ((-9.0, 5.0), (-25.0, -11.0)),
    "temperature": ((30.0, 69.0), (71.0, 90.0)),
    "error_rate": ((0.0, 0.04), (0.06, 0.3)),
}
SCENARIO_DEVICES = 20
SCENARIO_START = datetime(2025, 1, 1, tzinfo=UTC)


def device_health_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Device telemetry in `telemetry/`: 20 devices x 3 data points, a quarter of the readings RED.

    File i holds readings from its own 10 minutes, later than file i-1's, shuffled within the file
    (out of order inside a batch only); every key's readings therefore arrive in event-time order
    across files and none is later than the allowed lateness. About 3 % of lines are malformed,
    1 % read an unknown data point and 2 % repeat an earlier line of the same file (duplicates).
    """
    rng = random.Random(seed)
    per_file = max(1, n_events // FILES_PER_SCENARIO)
    paths = []
    for file_index in range(FILES_PER_SCENARIO):
        slice_start = SCENARIO_START + timedelta(minutes=10 * file_index)
        lines: list[str] = []
        for position in range(per_file):
            moment = slice_start + timedelta(milliseconds=600_000 * position // per_file)
            data_point = rng.choice(sorted(DEVICE_READINGS))
            green, red = DEVICE_READINGS[data_point]
            low, high = red if rng.random() < 0.25 else green
            reading: dict[str, object] = {
                "event_id": f"t{seed}-{file_index}-{position}",
                "event_time": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z",
                "device_id": f"dev-{rng.randrange(SCENARIO_DEVICES):03d}",
                "data_point": data_point,
                "value": round(rng.uniform(low, high), 3),
            }
            roll = rng.random()
            if roll < 0.01:
                lines.append(json.dumps(reading)[:20])
            elif roll < 0.02:
                lines.append(json.dumps({**reading, "value": "n/a"}))
            elif roll < 0.03:
                lines.append(json.dumps({k: v for k, v in reading.items() if k != "device_id"}))
            elif roll < 0.04:
                lines.append(json.dumps({**reading, "data_point": "humidity"}))
            else:
                lines.append(json.dumps(reading))
                if roll > 0.98:
                    lines.append(lines[-1])
        rng.shuffle(lines)
        paths.append(
            write_json_lines(landing_root / "telemetry", f"telemetry-{seed}-{file_index}.json", lines)
        )
    return paths


def device_health_late(landing_root: Path, seed: int) -> list[str]:
    """Readings of the scenario's devices and data points a day before it, a quarter RED."""
    rng = random.Random(seed)
    readings: list[dict[str, object]] = []
    for i in range(LATE_EVENTS):
        data_point = rng.choice(sorted(DEVICE_READINGS))
        green, red = DEVICE_READINGS[data_point]
        low, high = red if i % 4 == 0 else green
        moment = SCENARIO_START - LATE_BEFORE + timedelta(minutes=i)
        readings.append(
            {
                "event_id": f"t{seed}-late-{i}",
                "event_time": _event_time_text(moment),
                "device_id": f"dev-{rng.randrange(SCENARIO_DEVICES):03d}",
                "data_point": data_point,
                "value": round(rng.uniform(low, high), 3),
            }
        )
    return _write_late(landing_root / "telemetry", f"telemetry-{seed}-late.json", readings)


# The enricher's lookup table (conf/jobs/enricher.yaml): titles t00..t09 are in it, t10 and t11 not.
ENRICHER_TITLES = 12
ENRICHER_KNOWN_TITLES = 10
ENRICHER_START = datetime(2025, 1, 1, 20, tzinfo=UTC)
GENRES = ("drama", "comedy", "documentary", None)


def enricher_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Play events with nested `profile` and `device` objects in `plays/`, 3 % malformed lines.

    Titles t10 and t11 miss the lookup table; some events lack `device.os` or `profile`, which
    the mapping's defaults fill in.
    """
    rng = random.Random(seed)
    per_file = max(1, n_events // FILES_PER_SCENARIO)
    written = []
    for k in range(FILES_PER_SCENARIO):
        lines = []
        for i in range(per_file):
            moment = ENRICHER_START + timedelta(seconds=rng.uniform(0, 3 * 3600))
            event: dict[str, object] = {
                "event_id": f"p-{seed}-{k}-{i:05d}",
                "event_time": _event_time_text(moment),
                "title_id": f"t{rng.randrange(ENRICHER_TITLES):02d}",
                "position_ms": rng.randrange(0, 7_200_000),
                "device": {"model": rng.choice(("tv-1", "phone-2"))},
            }
            if rng.random() < 0.8:
                event["device"] = {**event["device"], "os": rng.choice(("ios", "android", "tizen"))}  # type: ignore[dict-item]
            if rng.random() < 0.9:
                event["profile"] = {
                    "id": f"pr{rng.randrange(50):03d}",
                    "country": rng.choice(("DE", "US", "BR")),
                }
            lines.append(_broken(rng, event, "event_id") if rng.random() < 0.03 else json.dumps(event))
        written.append(
            write_json_lines(landing_root / "plays", f"plays-{seed}-{k}.json", lines, 10.0 * (3 - k))
        )
    return written


def enricher_reference(lake_root: Path, seed: int) -> list[Path]:
    """Version `v{seed}` of the title table at `reference/titles` (conf/jobs/enricher.yaml)."""
    import pyarrow as pa

    from ops.driver.reference_tables import publish_reference

    rows = [
        {
            "title_id": f"t{i:02d}",
            "title_name": f"Title {i}",
            "genre": GENRES[i % len(GENRES)],
            "release_year": 1990 + 3 * i,
        }
        for i in range(ENRICHER_KNOWN_TITLES)
    ]
    schema = pa.schema(
        [
            ("title_id", pa.string()),
            ("title_name", pa.string()),
            ("genre", pa.string()),
            ("release_year", pa.int64()),
        ]
    )
    version_dir = publish_reference(
        lake_root / "reference" / "titles", f"v{seed}", pa.Table.from_pylist(rows, schema)
    )
    return [version_dir]


# Shipped job (conf/jobs/<name>.yaml) -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": Scenario(write=router_scenario),
    # Plays come up to 90 minutes after the 4 hours of impressions, and arrive up to 5 minutes late.
    "impressions_plays": Scenario(
        write=impressions_plays_scenario,
        flush=impressions_plays_flush,
        write_from=impressions_plays_scenario,
        period=timedelta(hours=6),
        late=impressions_plays_late,
        late_id_column="coalesce(impression_id, play_id)",
    ),
    # 3 hours of events, then an hour of silence: longer than the gap, so every session ends.
    "sessionizer": Scenario(
        write=sessionizer_scenario,
        flush=sessionizer_flush,
        write_from=sessionizer_scenario,
        period=timedelta(hours=4),
        late=sessionizer_late,
    ),
    "warehouse_writer": Scenario(write=warehouse_writer_scenario),
    # 6 hours of engagements: writes 6 hours apart continue each other (the users' 24 h windows span
    # several), and arrive at most 5 minutes late.
    "campaign_uniques": Scenario(
        write=campaign_uniques_scenario,
        flush=campaign_uniques_flush,
        write_from=campaign_uniques_scenario,
        period=timedelta(hours=6),
        late=campaign_uniques_late,
    ),
    "attack_chains": Scenario(
        write=attack_chains_scenario,
        flush=attack_chains_flush,
        late=attack_chains_late,
        late_id_column="event_ids",
    ),
    "device_health": Scenario(write=device_health_scenario, late=device_health_late),
    "enricher": Scenario(write=enricher_scenario, lake=enricher_reference),
}
