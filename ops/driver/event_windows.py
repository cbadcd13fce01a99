"""Event windows and a backfill's coverage of them: which it recomputes whole, which only in part.

The table is partitioned by event time; a partition's window is an hour or a day of event time,
identified by its start. The plan of a backfill carries its `Coverage` (`ops.backfill.coverage`
works it out from the archive), and the publish application publishes only the partitions of
windows the run recomputed whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# The key of `Coverage.partial` when every window is fed from outside the range.
ANY_WINDOW = datetime.min.replace(tzinfo=UTC)


def window_start(moment: datetime, window_hours: int) -> datetime:
    """The start of the event window (`window_hours` long, aligned on UTC midnight) holding `moment`."""
    moment = moment.astimezone(UTC)
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight + timedelta(hours=(moment.hour // window_hours) * window_hours)


def window_label(start: datetime, window_hours: int) -> str:
    """A window as the table's partition values name it (`event_date=...[/event_hour=...]`)."""
    if window_hours == 24:
        return f"event_date={start:%Y-%m-%d}"
    return f"event_date={start:%Y-%m-%d}/event_hour={start.hour}"


@dataclass(frozen=True)
class Coverage:
    """A range's event windows: those it recomputes whole (with the hours feeding them) and those
    it covers only in part (with the archived hours outside the range that also feed them).

    `every_window` is set when some hour in the range may feed any window: then `whole` cannot be
    listed, and the range is whole only if no archived hour lies outside it."""

    window_hours: int
    whole: Mapping[datetime, tuple[datetime, ...]]
    partial: Mapping[datetime, tuple[datetime, ...]]
    every_window: bool
    # For a range with partial windows: the smallest range around it that has none.
    widened: tuple[datetime, datetime] | None = None

    def is_whole(self, window: datetime) -> bool:
        """Whether the run may publish the partitions of the window starting at `window`."""
        return window in self.whole or (self.every_window and not self.partial)

    def window_of(self, values: Mapping[str, str]) -> datetime | None:
        """The window of a partition by its values (`event_date`, and `event_hour` if hourly);
        None for one without an event time."""
        if values.get("event_date") in (None, "__HIVE_DEFAULT_PARTITION__"):
            return None
        day = datetime.fromisoformat(values["event_date"]).replace(tzinfo=UTC)
        hour = values.get("event_hour")
        if hour is None or hour == "__HIVE_DEFAULT_PARTITION__":
            return day
        return window_start(day + timedelta(hours=int(hour)), self.window_hours)

    def as_json(self) -> dict[str, Any]:
        return {
            "window_hours": self.window_hours,
            "whole": {w.isoformat(): [h.isoformat() for h in hours] for w, hours in self.whole.items()},
            "partial": {w.isoformat(): [h.isoformat() for h in hours] for w, hours in self.partial.items()},
            "every_window": self.every_window,
            "widened": None if self.widened is None else [moment.isoformat() for moment in self.widened],
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Coverage:
        def windows(entries: Mapping[str, list[str]]) -> dict[datetime, tuple[datetime, ...]]:
            return {
                datetime.fromisoformat(w): tuple(datetime.fromisoformat(h) for h in hours)
                for w, hours in entries.items()
            }

        return cls(
            int(document["window_hours"]),
            windows(document["whole"]),
            windows(document["partial"]),
            bool(document["every_window"]),
            None
            if document["widened"] is None
            else (
                datetime.fromisoformat(document["widened"][0]),
                datetime.fromisoformat(document["widened"][1]),
            ),
        )

    def missing_hours(self) -> list[datetime]:
        return sorted({hour for hours in self.partial.values() for hour in hours})

    def lines(self) -> list[str]:
        """The dry run's account: each window replaced whole and why, each refused and why."""
        lines = []
        if self.every_window:
            why = "any window (an input's event times cannot be read here, or the kind's state has no bound)"
            lines.append(
                f"  every partition: the range's hours may feed {why}; "
                + ("the range covers the whole archive" if not self.partial else "REFUSED")
            )
        for window, hours in sorted(self.whole.items()):
            lines.append(
                f"  replaces whole {window_label(window, self.window_hours)}: fed only by arrival hours "
                f"{_hours_text(hours)}, all in the range"
            )
        for window, hours in sorted(self.partial.items()):
            if window == ANY_WINDOW:
                continue
            lines.append(
                f"  REFUSED {window_label(window, self.window_hours)}: also fed by arrival hours "
                f"{_hours_text(hours)}, outside the range"
            )
        return lines


def _hours_text(hours: Iterable[datetime]) -> str:
    ordered = sorted(hours)
    if len(ordered) > 6:
        return f"{ordered[0]:%Y-%m-%dT%H}:00 .. {ordered[-1]:%Y-%m-%dT%H}:00 ({len(ordered)} hours)"
    return ", ".join(f"{hour:%Y-%m-%dT%H}:00" for hour in ordered)
