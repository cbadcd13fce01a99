"""Rounds of fresh-process probes, one per set and round in rotated order, and their median table
(`benchmarks.jvm_options`, `benchmarks.session_confs`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """One probe: its JVM's CPU seconds, the whole process's wall seconds, and the rows it wrote
    (where the probe counts them)."""

    cpu: float
    wall: float
    rows: int | None = None


def run_rounds(sets: Sequence[str], rounds: int, probe: Callable[[str], Timing]) -> dict[str, list[Timing]]:
    """`probe(name)` for every set, `rounds` times, each probe's figures printed as it ends."""
    timings: dict[str, list[Timing]] = {name: [] for name in sets}
    for round_number in range(rounds):
        # Rotated, so no set always runs first (cold page cache) or last.
        shift = round_number % len(sets)
        for name in [*sets[shift:], *sets[:shift]]:
            timing = probe(name)
            timings[name].append(timing)
            rows = "" if timing.rows is None else f"{timing.rows} rows, "
            print(
                f"round {round_number + 1} {name}: {rows}{timing.cpu:.1f} s cpu, {timing.wall:.1f} s wall",
                flush=True,
            )
    return timings


def print_table(
    timings: Mapping[str, list[Timing]],
    labels: Mapping[str, str],
    heading: str,
    baseline: str,
    cpu_of: str = "JVM",
) -> None:
    """A markdown row per set: its label, median CPU (of `cpu_of`) and wall, and its CPU over
    `baseline`'s."""
    base = statistics.median(t.cpu for t in timings[baseline])
    print(f"| {heading} | {cpu_of} cpu (median) | wall (median) | cpu ratio to {baseline} |")
    print("|---|---|---|---|")
    for name, runs in timings.items():
        cpu = statistics.median(t.cpu for t in runs)
        wall = statistics.median(t.wall for t in runs)
        print(f"| {name} (`{labels[name] or 'none'}`) | {cpu:.1f} s | {wall:.1f} s | {cpu / base:.2f} |")
