"""Rate profiles: how many events per second the generator writes, over time.

A load to scale against (the autoscaler's tests, the demo, the benchmark) goes up and down: a
profile is a sequence of segments, each lasting some seconds, and the last one holds for ever.

    step 200 60          200 events/s for 60 s
    ramp 200 800 120     from 200 to 800 events/s, linearly, over 120 s
    noisy 300 0.15 1200  300 events/s +-15 %, a new value every second, for 1200 s

`RateProfile.parse` reads a comma-separated list of them (`--profile` of `python -m
synthetic.generator`); the noise is seeded, so a profile always gives the same rates.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

SegmentKind = Literal["step", "ramp", "noisy"]
# The number of values each segment kind takes, duration included.
_ARITY: dict[str, int] = {"step": 2, "ramp": 3, "noisy": 3}


@dataclass(frozen=True)
class Segment:
    """One stretch of a profile: `start` -> `end` events/s (equal for a step), or `start` +- `noise`."""

    kind: SegmentKind
    start: float
    end: float
    noise: float
    seconds: float

    def rate_at(self, offset: float, rng: random.Random) -> float:
        """Events per second `offset` seconds into the segment."""
        if self.kind == "ramp":
            return self.start + (self.end - self.start) * min(1.0, offset / self.seconds)
        if self.kind == "noisy":
            return self.start * rng.uniform(1 - self.noise, 1 + self.noise)
        return self.start


@dataclass(frozen=True)
class RateProfile:
    """Events per second over time; after the last segment, its final rate holds."""

    segments: tuple[Segment, ...]
    seed: int = 0

    @classmethod
    def constant(cls, events_per_second: float) -> RateProfile:
        return cls((Segment("step", events_per_second, events_per_second, 0.0, float("inf")),))

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> RateProfile:
        """A profile from its text form (see the module docstring); ValueError quotes a bad segment."""
        segments = tuple(_parse_segment(part.strip()) for part in text.split(",") if part.strip())
        if not segments:
            raise ValueError(f"rate profile {text!r} has no segment")
        return cls(segments, seed)

    def rate_at(self, elapsed: float) -> float:
        """Events per second `elapsed` seconds after the start."""
        offset = elapsed
        for segment in self.segments:
            if offset < segment.seconds:
                return segment.rate_at(offset, self._rng(elapsed))
            offset -= segment.seconds
        last = self.segments[-1]
        return last.rate_at(last.seconds, self._rng(elapsed))

    @property
    def seconds(self) -> float:
        """How long the profile runs before its last rate holds."""
        return sum(segment.seconds for segment in self.segments)

    def _rng(self, elapsed: float) -> random.Random:
        # One draw per whole second, the same for any caller asking about that second.
        return random.Random(self.seed * 1_000_003 + int(elapsed))


def _parse_segment(text: str) -> Segment:
    kind, *values = text.split()
    if kind not in _ARITY:
        raise ValueError(f"rate profile segment {text!r}: kind must be one of {', '.join(_ARITY)}")
    if len(values) != _ARITY[kind]:
        raise ValueError(f"rate profile segment {text!r}: {kind} takes {_ARITY[kind]} numbers")
    try:
        numbers = [float(value) for value in values]
    except ValueError:
        raise ValueError(f"rate profile segment {text!r}: {' '.join(values)!r} are not all numbers") from None
    if any(number < 0 for number in numbers) or numbers[-1] <= 0:
        raise ValueError(f"rate profile segment {text!r}: rates must be >= 0 and the duration > 0")
    if kind == "step":
        return Segment("step", numbers[0], numbers[0], 0.0, numbers[1])
    if kind == "ramp":
        return Segment("ramp", numbers[0], numbers[1], 0.0, numbers[2])
    if numbers[1] >= 1:
        raise ValueError(f"rate profile segment {text!r}: noise is a fraction below 1, e.g. 0.15")
    return Segment("noisy", numbers[0], numbers[0], numbers[1], numbers[2])
