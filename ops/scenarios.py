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

from collections.abc import Callable
from dataclasses import dataclass
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


# Pipeline kind -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": Scenario(write=router_scenario),
}
