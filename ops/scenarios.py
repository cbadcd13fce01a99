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

from ops.generator import write_batch

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


def _pattern_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _pattern_file(landing_dir: Path, file_name: str, lines: list[str], age_seconds: float) -> Path:
    """One landing file written atomically, modified `age_seconds` ago (older files are read first)."""
    landing_dir.mkdir(parents=True, exist_ok=True)
    path = landing_dir / file_name
    temp_path = landing_dir / f".{file_name}.{os.getpid()}.tmp"
    temp_path.write_text("".join(line + "\n" for line in lines))
    modified = time.time() - age_seconds
    os.utime(temp_path, (modified, modified))
    os.replace(temp_path, path)
    return path


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
        event = {**fields, "event_time": _pattern_time(moment)}
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
        written.append(_pattern_file(landing_dir, f"{prefix}-{k}.json", chunk, age))
    return written


# conf/jobs/campaign_uniques.yaml's allowed lateness; its scenario delays events by at most half.
CAMPAIGN_UNIQUES_LATENESS = timedelta(seconds=600)
CAMPAIGN_UNIQUES_START = datetime(2025, 1, 1, tzinfo=UTC)


def campaign_uniques_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Engagements of 150 users with 12 campaigns over 6 hours, in `engagements/`.

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
        timed.append((CAMPAIGN_UNIQUES_START + offset, event))
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
    event = {
        "event_id": "g-flush",
        "campaign_id": "c-flush",
        "user_id": "u-flush",
        "event_time": _pattern_time(CAMPAIGN_UNIQUES_START + timedelta(days=30)),
    }
    return [_pattern_file(landing_root / "engagements", "engagements-flush.json", [json.dumps(event)], 0.0)]


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
    event = {
        "event_id": "s-flush",
        "event_type": "heartbeat",
        "host": "h-flush",
        "event_time": _pattern_time(ATTACK_CHAINS_START + timedelta(days=30)),
    }
    return [_pattern_file(landing_root / "security_events", "security-flush.json", [json.dumps(event)], 0.0)]


# Pipeline kind -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": Scenario(write=router_scenario),
    "campaign_uniques": Scenario(write=campaign_uniques_scenario, flush=campaign_uniques_flush),
    "attack_chains": Scenario(write=attack_chains_scenario, flush=attack_chains_flush),
}
