"""A clock that moves only when the test says so, for loops that wait out backoffs and graces."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

# A fixed, timezone-aware start: every time a test sees is an offset from it.
START = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)


@dataclass
class FakeClock:
    """Callable like `ops.ledger.utcnow`; `advance(seconds)` is the only way time passes."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward and return the new time."""
        self.now += timedelta(seconds=seconds)
        return self.now

    def elapsed(self, since: datetime = START) -> float:
        """Seconds from `since` to now."""
        return (self.now - since).total_seconds()


@pytest.fixture
def fake_clock() -> FakeClock:
    """A fake clock at `START`."""
    return FakeClock()
