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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
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


def router_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Product events with 5 % malformed lines, in `events/`."""
    per_file = max(1, n_events // FILES_PER_SCENARIO)
    return [
        write_batch(landing_root / "events", per_file, 0.05, seed * 1000 + i).path
        for i in range(FILES_PER_SCENARIO)
    ]


# The sessionizer scenario's sources (conf/jobs/sessionizer.yaml) and its shape.
SESSION_SOURCES = ("web_events", "app_events")
SESSION_USERS = 40
SESSION_FILE_MINUTES = 60
SESSION_JITTER_MINUTES = 5
BOT_USER = "bot00001"


def _write_lines(landing_dir: Path, name: str, lines: list[str]) -> Path:
    landing_dir.mkdir(parents=True, exist_ok=True)
    path = landing_dir / name
    temp_path = landing_dir / f".{name}.{os.getpid()}.tmp"
    temp_path.write_text("".join(line + "\n" for line in lines))
    os.replace(temp_path, path)
    return path


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
            paths.append(_write_lines(landing_root / source, name, lines))
    return paths


def sessionizer_flush(landing_root: Path) -> list[Path]:
    """One event per source 30 days after any scenario event, from a user of its own."""
    moment = DEFAULT_START + timedelta(days=30)
    paths = []
    for source in SESSION_SOURCES:
        event = {**make_event(random.Random(0), moment), "user_id": f"flush_{source}"}
        paths.append(_write_lines(landing_root / source, f"{source}-flush.json", [json.dumps(event)]))
    return paths


# Pipeline kind -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": Scenario(write=router_scenario),
    "sessionizer": Scenario(write=sessionizer_scenario, flush=sessionizer_flush),
}
