"""Asset locations: an event-sourced materialized view of where each asset is cached.

A python job that ships with the platform as an example of the team jobs' contract
(`jobs.user_code`; its job file `conf/examples/asset_locations.yaml`) and of a job with a view
(`pipeline.view`): its sink is the view's changelog, and the platform publishes each committed
batch of it into PostgreSQL (`ops.views`, `warden view asset_locations`).

Two sources. `changes`: one location added to or removed from an asset (`action` "add" or
"remove"; any other action is ignored). `publishes`: the full publish of the system of record,
one event per asset with its whole set of locations (`locations`, comma-separated, empty for
none), re-emitted on demand or on a schedule to heal drift (`synthetic.assets.write_full_publish`).

The fold is last-writer-wins per location, by (event time, event id): a location is in an
asset's set when the newest event about it adds it, and a publish is an event about every
location, adding those it lists and removing the others. So the view does not depend on how the
events were cut into batches or in what order they arrived, which is what lets a rewind, a
restate or a kill loop give a clean run's view. A batch writes a row for an asset only when its
set changed: `locations` sorted, null when the set became empty (the key is deleted). A full
publish that agrees with the view writes nothing (no churn). The row's `event_date` is that of
the newest event of the asset in the batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from jobs.user_code import JobContext

KEY = "asset_id"
OUTPUT_SCHEMA = "asset_id string, locations array<string>, event_date date"
STATE_SCHEMA = "view string"
# An event's place in the last-writer-wins order: (event time in microseconds, event id).
Stamp = tuple[int, str]


@dataclass
class AssetLocations:
    """One asset's fold: each location's newest event, and the newest publish (the floor: an event
    older than it about a location it did not list has been overruled by it)."""

    newest: dict[str, tuple[Stamp, bool]] = field(default_factory=dict)
    floor: Stamp | None = None

    def change(self, stamp: Stamp, location: str, present: bool) -> None:
        """Apply one add (present) or remove of `location`, unless a newer event overrules it."""
        current = self.newest.get(location)
        if (current is None or stamp > current[0]) and (self.floor is None or stamp > self.floor):
            self.newest[location] = (stamp, present)

    def publish(self, stamp: Stamp, locations: set[str]) -> None:
        """Apply a full publish: every location it lists is added, every other one removed."""
        for location in locations | set(self.newest):
            self.change(stamp, location, location in locations)
        if self.floor is None or stamp > self.floor:
            self.floor = stamp
        # A removal the floor overrules anyway tells nothing more.
        self.newest = {
            location: (when, present)
            for location, (when, present) in self.newest.items()
            if present or when > self.floor
        }

    def locations(self) -> list[str]:
        return sorted(location for location, (_, present) in self.newest.items() if present)

    def dumps(self) -> str:
        return json.dumps({"newest": self.newest, "floor": self.floor})

    @classmethod
    def loads(cls, text: str) -> AssetLocations:
        saved = json.loads(text)
        floor = saved["floor"]
        return cls(
            {
                location: ((when[0], when[1]), present)
                for location, (when, present) in saved["newest"].items()
            },
            None if floor is None else (floor[0], floor[1]),
        )

    def apply(self, events: pd.DataFrame) -> None:
        """Apply a frame of the job's events (`_events`), in the last-writer-wins order."""
        for row in events.sort_values(["event_time", "event_id"]).itertuples(index=False):
            stamp = (pd.Timestamp(row.event_time).value // 1000, row.event_id)
            if row.kind == "publish":
                self.publish(stamp, set(row.locations))
            else:
                self.change(stamp, row.locations[0], row.kind == "add")


def build(inputs: Mapping[str, DataFrame], context: JobContext) -> DataFrame:
    """The view's changelog: a row per asset whose set of locations a batch changed."""
    events = _events(inputs)
    grouped = events.groupBy(KEY)
    if events.isStreaming:
        return grouped.applyInPandasWithState(
            _fold_batch, OUTPUT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout
        )
    # A batch run (a backfill's check, the analyzer) folds every event of an asset at once.
    return grouped.applyInPandas(_fold_all, OUTPUT_SCHEMA)


def _events(inputs: Mapping[str, DataFrame]) -> DataFrame:
    """Both sources as one stream of (asset_id, event_time, event_id, kind, locations)."""
    changes = (
        inputs["changes"]
        .where(F.col("action").isin("add", "remove"))
        .select(
            KEY,
            "event_time",
            "event_id",
            F.col("action").alias("kind"),
            F.array("location").alias("locations"),
        )
    )
    publishes = inputs["publishes"].select(
        KEY,
        "event_time",
        "event_id",
        F.lit("publish").alias("kind"),
        F.filter(F.split("locations", ","), lambda location: location != "").alias("locations"),
    )
    return changes.unionByName(publishes)


def _fold_batch(key: tuple[str], frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    view = AssetLocations.loads(state.get[0]) if state.exists else AssetLocations()
    before = view.locations()
    newest: pd.Timestamp | None = None
    for frame in frames:
        view.apply(frame)
        newest = frame["event_time"].max() if newest is None else max(newest, frame["event_time"].max())
    state.update((view.dumps(),))
    after = view.locations()
    if after != before and newest is not None:
        yield _row(key[0], after, newest.date())


def _fold_all(key: tuple[str], events: pd.DataFrame) -> pd.DataFrame:
    view = AssetLocations()
    view.apply(events)
    if not view.locations():
        return pd.DataFrame(
            {column: pd.Series([], dtype=object) for column in ("asset_id", "locations", "event_date")}
        )
    return _row(key[0], view.locations(), events["event_time"].max().date())


def _row(asset_id: str, locations: list[str], event_date: date) -> pd.DataFrame:
    return pd.DataFrame(
        {"asset_id": [asset_id], "locations": [locations or None], "event_date": [event_date]}
    )
