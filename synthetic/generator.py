"""Deterministic synthetic product events for the landing zone (the router job's source).

`write_batch` writes one newline-delimited JSON file and returns exactly what it wrote: the valid
events as dicts and each malformed line with its kind and the field it broke, so a test can check
a job's output against known input without re-implementing Spark SQL. Files appear atomically:
they are written under a temporary name that does not match `*.json` and renamed when complete,
so a streaming file source never reads half a file.

`run` writes such files continuously for the demo; `python -m synthetic.generator --landing DIR --rate N`
runs it from the command line.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from ops.atomic import write_atomically
from synthetic.profiles import RateProfile

MalformedKind = Literal["bad_json", "wrong_type", "missing_field"]
MALFORMED_KINDS: tuple[MalformedKind, ...] = ("bad_json", "wrong_type", "missing_field")

EVENT_TYPES = ("view", "view", "view", "click", "click", "add_to_cart", "purchase")
COUNTRIES = ("DE", "FR", "ES", "IT", "NL", "US", "GB", "BR", "IN", "JP")
DEVICES = ("ios", "android", "web", "tv")
PAGES = ("/", "/search", "/product", "/cart", "/checkout", "/account")
REQUIRED_FIELDS = ("event_id", "event_time", "user_id", "event_type")
# The non-string fields a "wrong_type" line breaks, with the unparsable text put in their place.
TYPED_FIELDS = {"event_time": "yesterday", "amount": "abc"}
DEFAULT_START = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class MalformedLine:
    """A line written broken on purpose: how it is broken, which field (None for bad JSON)."""

    kind: MalformedKind
    field: str | None
    line: str


@dataclass(frozen=True)
class GeneratedBatch:
    """What one `write_batch` call wrote to `path`."""

    path: Path
    events: tuple[dict[str, Any], ...]
    malformed: tuple[MalformedLine, ...]

    @property
    def total(self) -> int:
        return len(self.events) + len(self.malformed)

    def malformed_by_kind(self) -> dict[str, int]:
        return dict(Counter(line.kind for line in self.malformed))


@dataclass
class RunTotals:
    """Running totals of a continuous `run`."""

    files: int = 0
    events: int = 0
    malformed: int = 0
    paths: list[Path] = field(default_factory=list)


def _format_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def make_event(rng: random.Random, moment: datetime) -> dict[str, Any]:
    """One valid product event; optional fields are sometimes absent, `amount` only on purchases."""
    event_type = rng.choice(EVENT_TYPES)
    event: dict[str, Any] = {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "event_time": _format_time(moment),
        "user_id": f"u{rng.randrange(1, 5000):05d}",
        "event_type": event_type,
    }
    if rng.random() < 0.95:
        event["country"] = rng.choice(COUNTRIES)
    if rng.random() < 0.95:
        event["device"] = rng.choice(DEVICES)
    event["page"] = rng.choice(PAGES)
    if event_type == "purchase":
        # Some zero-amount purchases, which a filter like `amount > 0` must drop.
        event["amount"] = 0.0 if rng.random() < 0.1 else round(rng.uniform(1, 500), 2)
    return event


def break_event(rng: random.Random, event: dict[str, Any], kind: MalformedKind) -> MalformedLine:
    """A malformed line made from `event` by breaking it the given way."""
    if kind == "bad_json":
        line = json.dumps(event)
        # Half a JSON object is never a valid one.
        return MalformedLine(kind, None, line[: len(line) // 2])
    if kind == "wrong_type":
        name = rng.choice(sorted(TYPED_FIELDS))
        return MalformedLine(kind, name, json.dumps({**event, name: TYPED_FIELDS[name]}))
    name = rng.choice(REQUIRED_FIELDS)
    return MalformedLine(kind, name, json.dumps({k: v for k, v in event.items() if k != name}))


def write_batch(
    landing_dir: Path,
    n_events: int,
    malformed_fraction: float = 0.0,
    seed: int = 0,
    *,
    start: datetime = DEFAULT_START,
    span_seconds: float = 3600.0,
    file_name: str | None = None,
) -> GeneratedBatch:
    """Write `n_events` lines (a `malformed_fraction` of them broken) as one atomic JSON file.

    The same arguments always produce the same file. Event times are spread over
    [`start`, `start` + `span_seconds`); malformed lines cycle through the kinds bad JSON, wrong
    type, missing required field. The file is `events-<seed>.json` unless `file_name` is given.
    """
    if not 0.0 <= malformed_fraction <= 1.0:
        raise ValueError(f"malformed_fraction must be within [0, 1], got {malformed_fraction!r}")
    rng = random.Random(seed)
    n_malformed = round(n_events * malformed_fraction)
    broken_positions = set(rng.sample(range(n_events), n_malformed))
    events: list[dict[str, Any]] = []
    malformed: list[MalformedLine] = []
    lines: list[str] = []
    for position in range(n_events):
        moment = start + timedelta(seconds=span_seconds * position / max(n_events, 1))
        event = make_event(rng, moment)
        if position in broken_positions:
            broken = break_event(rng, event, MALFORMED_KINDS[len(malformed) % len(MALFORMED_KINDS)])
            malformed.append(broken)
            lines.append(broken.line)
        else:
            events.append(event)
            lines.append(json.dumps(event))
    path = landing_dir / (file_name or f"events-{seed}.json")
    write_atomically(path, "".join(line + "\n" for line in lines))
    return GeneratedBatch(path=path, events=tuple(events), malformed=tuple(malformed))


class FileLoad:
    """Landing files written on demand, each of `events_per_file` events (times a seeded noise
    factor), named in order: a load counted in files per tick, as the autoscaling tests and the
    benchmark step it (a driver reads a bounded number of files per batch)."""

    def __init__(self, landing_dir: Path, events_per_file: int, seed: int = 0) -> None:
        self.landing_dir = landing_dir
        self.events_per_file = events_per_file
        self.seed = seed
        self.written = 0
        self._rng = random.Random(seed)

    def write(self, files: int, noise: float = 0.0) -> None:
        """Write `files` files of `events_per_file` events +- `noise` (a fraction) each."""
        for _ in range(files):
            events = max(1, round(self.events_per_file * self._rng.uniform(1 - noise, 1 + noise)))
            name = f"events-{self.seed:03d}-{self.written:06d}.json"
            write_batch(self.landing_dir, events, 0.0, self.seed * 1_000_000 + self.written, file_name=name)
            self.written += 1


def run(
    landing_dir: Path,
    events_per_second: float | RateProfile,
    files_per_second: float = 1.0,
    *,
    malformed_fraction: float = 0.01,
    seed: int = 0,
    stop_event: threading.Event | None = None,
    duration: float | None = None,
    on_file: Callable[[GeneratedBatch, RunTotals], None] | None = None,
) -> RunTotals:
    """Write files continuously at the given rates until `stop_event` is set or `duration` passes.

    Event times are "now", so watermark lag and per-hour partitions look like production. A
    `RateProfile` varies the rate over time (a slot that owes less than one event writes no
    file). File `i` uses seed `seed + i`; names carry the start time, so a second run never reuses
    a name the file source has already seen. `on_file(batch, totals)` is called after every file.
    """
    profile = (
        events_per_second
        if isinstance(events_per_second, RateProfile)
        else RateProfile.constant(events_per_second)
    )
    if files_per_second <= 0 or (isinstance(events_per_second, float | int) and events_per_second <= 0):
        raise ValueError("events_per_second and files_per_second must be positive")
    stop_event = stop_event or threading.Event()
    interval = 1.0 / files_per_second
    run_tag = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    started = time.monotonic()
    totals = RunTotals()
    slots, owed = 0, 0.0
    while not stop_event.is_set() and (duration is None or time.monotonic() - started < duration):
        # Fractions of an event carry over to the next slot, so any rate is met on average.
        owed += profile.rate_at(slots * interval) * interval
        per_file = int(owed)
        owed -= per_file
        slots += 1
        if per_file == 0:
            stop_event.wait(max(0.0, started + slots * interval - time.monotonic()))
            continue
        batch = write_batch(
            landing_dir,
            per_file,
            malformed_fraction,
            seed + totals.files,
            start=datetime.now(UTC),
            span_seconds=interval,
            file_name=f"events-{run_tag}-{totals.files:06d}.json",
        )
        totals.files += 1
        totals.events += len(batch.events)
        totals.malformed += len(batch.malformed)
        totals.paths.append(batch.path)
        if on_file is not None:
            on_file(batch, totals)
        # Sleep to the next slot of the schedule, so writing time does not slow the rate down.
        stop_event.wait(max(0.0, started + slots * interval - time.monotonic()))
    return totals


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m synthetic.generator --landing DIR --rate N`: write events until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m synthetic.generator", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--landing", type=Path, required=True, help="landing directory of the job's source")
    rate = parser.add_mutually_exclusive_group(required=True)
    rate.add_argument("--rate", type=float, help="events per second")
    rate.add_argument(
        "--profile",
        help="events per second over time, e.g. 'step 200 60, ramp 200 800 30, noisy 800 0.15 600' "
        "(see synthetic/profiles.py)",
    )
    parser.add_argument("--files-per-second", type=float, default=1.0)
    parser.add_argument("--malformed-fraction", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    args = parser.parse_args(argv)

    def progress(batch: GeneratedBatch, totals: RunTotals) -> None:
        print(
            f"wrote {batch.path.name}: {batch.total} lines ({len(batch.malformed)} malformed); "
            f"total {totals.events} events, {totals.malformed} malformed in {totals.files} files",
            flush=True,
        )

    try:
        load = RateProfile.parse(args.profile, args.seed) if args.profile else args.rate
    except ValueError as error:
        parser.error(str(error))
    try:
        run(
            args.landing,
            load,
            args.files_per_second,
            malformed_fraction=args.malformed_fraction,
            seed=args.seed,
            duration=args.duration,
            on_file=progress,
        )
    except KeyboardInterrupt:
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
