"""A bounded CPU hog for tests of a busy machine: one spinning process per core, each ending by
itself after `seconds` (so a test that dies leaves no hog behind for long) and stopped when the
context exits."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager


def _spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(10_000))


@contextmanager
def cpu_hog(seconds: float, processes: int | None = None) -> Iterator[int]:
    """Keep `processes` (default: one per core) busy for at most `seconds`; yields their number."""
    count = processes or os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")
    hogs = [context.Process(target=_spin, args=(seconds,), daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        yield count
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(timeout=10)
