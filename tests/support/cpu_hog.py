"""A bounded CPU hog for tests of a busy machine: spinning Python processes that bring the load to
a number per core, each ending by itself after `seconds` (a test that dies leaves no hog behind for
long) and stopped when the context exits. The hogs get none of the test's environment: they are
nobody's platform.

The hog counts what already runs: it spins only the processes the last minute's load average
lacks. Alone, a test gets them all; inside `make test`, whose other workers keep two cores at a
load of 4-9, it adds few or none, instead of taking their CPU for the minutes a platform start
lasts."""

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


def missing_load(per_core: int) -> int:
    """Processes that would bring the load average to `per_core` per core (none when it is there)."""
    return max(0, per_core * (os.cpu_count() or 1) - round(os.getloadavg()[0]))


@contextmanager
def cpu_hog(seconds: float, per_core: int = 1) -> Iterator[int]:
    """Keep the load at `per_core` processes per core for at most `seconds`, spinning what the
    load lacks when it starts; yields how many spin."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN.format(seconds=seconds)], env={"PATH": os.environ["PATH"]}
        )
        for _ in range(missing_load(per_core))
    ]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.wait(timeout=10)
