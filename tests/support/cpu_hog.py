"""A bounded CPU hog for tests of a busy machine: one spinning Python process per core, each
ending by itself after `seconds` (a test that dies leaves no hog behind for long) and stopped when
the context exits. The hogs get none of the test's environment: they are nobody's platform."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = """
import time
deadline = time.monotonic() + {seconds}
while time.monotonic() < deadline:
    sum(range(10_000))
"""


@contextmanager
def cpu_hog(seconds: float, processes: int | None = None) -> Iterator[int]:
    """Keep `processes` (default: one per core) busy for at most `seconds`; yields their number."""
    count = processes or os.cpu_count() or 1
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN.format(seconds=seconds)], env={"PATH": os.environ["PATH"]}
        )
        for _ in range(count)
    ]
    try:
        yield count
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.wait(timeout=10)
