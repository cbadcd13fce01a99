"""Deterministic synthetic inputs, one scenario per job kind, for tests, benchmarks and the demo.

A scenario writes `n_events` events (in a few atomic files) under a landing root, into the
landing directories of that kind's sources, and returns the files it wrote. The same arguments
always write the same files. Scenarios never write an event later than the kind's allowed
lateness, so the streaming and the batch runner agree on them row for row; tests that need late,
duplicate or out-of-order events write them by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ops.generator import write_batch

# (landing_root, n_events, seed) -> the files written.
Scenario = Callable[[Path, int, int], list[Path]]
FILES_PER_SCENARIO = 3


def router_scenario(landing_root: Path, n_events: int, seed: int) -> list[Path]:
    """Product events with 5 % malformed lines, in `events/`."""
    per_file = max(1, n_events // FILES_PER_SCENARIO)
    return [
        write_batch(landing_root / "events", per_file, 0.05, seed * 1000 + i).path
        for i in range(FILES_PER_SCENARIO)
    ]


# Pipeline kind -> its scenario.
SCENARIOS: dict[str, Scenario] = {
    "router": router_scenario,
}
