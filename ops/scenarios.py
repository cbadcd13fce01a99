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


# Per data point: (GREEN range, RED range) of the values the device_health scenario draws from,
# for the rules of conf/jobs/device_health.yaml; other specs' rules just see other transitions.
DEVICE_READINGS = {
    "signal_db": ((-9.0, 5.0), (-25.0, -11.0)),
    "temperature": ((30.0, 69.0), (71.0, 90.0)),
    "error_rate": ((0.0, 0.04), (0.06, 0.3)),
}
SCENARIO_DEVICES = 20
SCENARIO_START = datetime(2025, 1, 1, tzinfo=UTC)


def _write_json_lines(landing_dir: Path, name: str, lines: list[str]) -> Path:
    """One landing file, written under a temporary name and renamed complete."""
    landing_dir.mkdir(parents=True, exist_ok=True)
    path = landing_dir / name
    temp_path = landing_dir / f".{name}.{os.getpid()}.tmp"
    temp_path.write_text("".join(line + "\n" for line in lines))
    os.replace(temp_path, path)
    return path


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
            _write_json_lines(landing_root / "telemetry", f"telemetry-{seed}-{file_index}.json", lines)
        )
    return paths


# Pipeline kind -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": Scenario(write=router_scenario),
    # Rows are emitted as readings arrive, not when the watermark passes: nothing to flush.
    "device_health": Scenario(write=device_health_scenario),
}
