"""Deterministic synthetic inputs, one scenario per job kind, for tests, benchmarks and the demo.

A scenario writes `n_events` events (in a few atomic files) under a landing root, into the
landing directories of that kind's sources, and returns the files it wrote. The same arguments
always write the same files. Scenarios never write an event later than the kind's allowed
lateness, so the streaming and the batch runner agree on them row for row; tests that need late,
duplicate or out-of-order events write them by hand.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ops.generator import DEFAULT_START, MALFORMED_KINDS, break_event, make_event, write_batch

FILES_PER_SCENARIO = 3


@dataclass(frozen=True)
class Scenario:
    """How to write a kind's synthetic input, and for stateful kinds how to close its state."""

    # (landing_root, n_events, seed) -> the files written.
    write: Callable[[Path, int, int], list[Path]]
    # landing_root -> the files written.
    flush: Callable[[Path], list[Path]] | None = None
    # (lake_root, seed) -> the side inputs the kind reads from the lake (e.g. a lookup table).
    lake: Callable[[Path, int], list[Path]] | None = None


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


def write_json_lines(landing_dir: Path, file_name: str, lines: list[str], age_seconds: float = 0.0) -> Path:
    """One landing file written atomically, its modification time `age_seconds` in the past.

    The file source reads the oldest files first, so ages order the files of one scenario.
    """
    landing_dir.mkdir(parents=True, exist_ok=True)
    path = landing_dir / file_name
    temp_path = landing_dir / f".{file_name}.{os.getpid()}.tmp"
    temp_path.write_text("".join(line + "\n" for line in lines))
    modified = time.time() - age_seconds
    os.utime(temp_path, (modified, modified))
    os.replace(temp_path, path)
    return path


def _broken(rng: random.Random, event: dict[str, object], id_field: str) -> str:
    """A malformed copy of `event`: truncated JSON, an unparsable event time, or no id."""
    kind = rng.randrange(3)
    if kind == 0:
        line = json.dumps(event)
        return line[: len(line) // 2]
    if kind == 1:
        return json.dumps({**event, "event_time": "yesterday"})
    return json.dumps({k: v for k, v in event.items() if k != id_field})


def impressions_plays_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Impressions and plays of 40 profiles x 12 titles over ~5 hours, in `impressions/` and `plays/`.

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
        moment = IMPRESSIONS_PLAYS_START + timedelta(seconds=4 * 3600 * i / n_impressions)
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
        times[play_id] = IMPRESSIONS_PLAYS_START + timedelta(seconds=rng.randrange(0, 5 * 3600))
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


def impressions_plays_flush(landing_root: Path) -> list[Path]:
    """An impression and a play 30 days later, of different profiles (so they join nothing)."""
    moment = _event_time_text(IMPRESSIONS_PLAYS_START + timedelta(days=30))
    impression = {"impression_id": "i-flush", "profile_id": "flush-i", "title_id": "t", "event_time": moment}
    play = {"play_id": "q-flush", "profile_id": "flush-q", "title_id": "t", "event_time": moment}
    return [
        write_json_lines(landing_root / "impressions", "impressions-flush.json", [json.dumps(impression)]),
        write_json_lines(landing_root / "plays", "plays-flush.json", [json.dumps(play)]),
    ]


# The sessionizer scenario's sources (conf/jobs/sessionizer.yaml) and its shape.
SESSION_SOURCES = ("web_events", "app_events")
SESSION_USERS = 40
SESSION_FILE_MINUTES = 60
SESSION_JITTER_MINUTES = 5
BOT_USER = "bot00001"


def sessionizer_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Web and app events of 40 users, a bot active every minute, duplicates and malformed lines.

    Each source gets `FILES_PER_SCENARIO` files of one hour each, in time order; within a file
    event times jitter by up to 5 minutes (out of order, well within the sessionizer's lateness).
    About 3 % of the lines repeat an earlier event of the same file (a duplicate event id) and 2 %
    are malformed. The bot sends one web event a minute for the whole scenario, so its sessions
    are cut by `max_session_minutes`, never by the gap.
    """
    paths = []
    per_file = max(1, n_events // (FILES_PER_SCENARIO * len(SESSION_SOURCES)))
    for file_index in range(FILES_PER_SCENARIO):
        file_start = DEFAULT_START + timedelta(minutes=SESSION_FILE_MINUTES * file_index)
        for source_index, source in enumerate(SESSION_SOURCES):
            rng = random.Random(seed * 1000 + file_index * 10 + source_index)
            lines: list[str] = []
            for position in range(per_file):
                minutes = SESSION_FILE_MINUTES * position / per_file
                jitter = rng.uniform(-SESSION_JITTER_MINUTES, SESSION_JITTER_MINUTES)
                minutes = min(max(minutes + jitter, 0.0), SESSION_FILE_MINUTES - 0.001)
                event = make_event(rng, file_start + timedelta(minutes=minutes))
                event["user_id"] = f"u{rng.randrange(SESSION_USERS):05d}"
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
    moment = DEFAULT_START + timedelta(days=30)
    paths = []
    for source in SESSION_SOURCES:
        event = {**make_event(random.Random(0), moment), "user_id": f"flush_{source}"}
        paths.append(write_json_lines(landing_root / source, f"{source}-flush.json", [json.dumps(event)]))
    return paths


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

    from ops.reference_tables import publish_reference

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


# Pipeline kind -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": Scenario(write=router_scenario),
    "impressions_plays": Scenario(write=impressions_plays_scenario, flush=impressions_plays_flush),
    "sessionizer": Scenario(write=sessionizer_scenario, flush=sessionizer_flush),
    "warehouse_writer": Scenario(write=warehouse_writer_scenario),
    "enricher": Scenario(write=enricher_scenario, lake=enricher_reference),
}
