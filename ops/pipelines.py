"""The `pipeline` section of a job file: one frozen model per job kind.

Every pipeline kind has `kind` (the discriminator), `sink: FileSink` and an `inputs` property
(the name its transform knows each source by -> `FileSource`); `jobs/catalog.py` maps each kind to
its transform. A new kind adds its model here and to the `Pipeline` union at the bottom.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Malformed events land in the job's sink under this route, beside the real routes.
DEAD_LETTER_ROUTE = "dead_letter"

FieldType = Literal["string", "long", "double", "boolean", "timestamp"]


class Model(BaseModel):
    """Base for every config model: immutable, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceField(Model):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: FieldType
    required: bool = False


class FileSource(Model):
    """A landing-zone directory of newline-delimited JSON files, read with an explicit schema."""

    path: str
    fields: tuple[SourceField, ...] = Field(min_length=1)
    event_time_field: str = "event_time"

    @model_validator(mode="after")
    def _event_time_is_a_timestamp_field(self) -> FileSource:
        types = {f.name: f.type for f in self.fields}
        if types.get(self.event_time_field) != "timestamp":
            raise ValueError(
                f"event_time_field {self.event_time_field!r} must name a field of type timestamp"
            )
        if len(types) != len(self.fields):
            raise ValueError("field names must be unique")
        return self


class FileSink(Model):
    """A Parquet directory in the lake written by Spark's file sink."""

    path: str


class Route(Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    filter: str = Field(min_length=1, description="A Spark SQL boolean expression over the source fields.")
    columns: tuple[str, ...] = Field(min_length=1)


class RouterPipeline(Model):
    kind: Literal["router"]
    source: FileSource
    sink: FileSink
    routes: tuple[Route, ...] = Field(min_length=1)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"events": self.source}

    @model_validator(mode="after")
    def _routes_are_consistent(self) -> RouterPipeline:
        known = {f.name for f in self.source.fields}
        names = [r.name for r in self.routes]
        if DEAD_LETTER_ROUTE in names:
            raise ValueError(f"route name {DEAD_LETTER_ROUTE!r} is reserved for malformed events")
        if len(set(names)) != len(names):
            raise ValueError(f"route names must be unique, got {names}")
        for route in self.routes:
            unknown = [c for c in route.columns if c not in known]
            if unknown:
                raise ValueError(f"route {route.name!r} projects unknown columns {unknown}")
        return self


# The fields a device_health source must declare (name -> type), beside its event time.
DEVICE_HEALTH_FIELDS: dict[str, FieldType] = {
    "device_id": "string",
    "data_point": "string",
    "value": "double",
    "event_id": "string",
}


class DataPointRule(Model):
    """When a reading of one data point is RED (otherwise it is GREEN).

    Either `red_when`, a Spark SQL boolean expression over the source fields (`value < -10`), or
    bounds: RED below `red_below` or above `red_above` (a reading on a bound is GREEN).
    """

    name: str = Field(min_length=1)
    red_when: str | None = Field(None, min_length=1)
    red_below: float | None = None
    red_above: float | None = None

    @model_validator(mode="after")
    def _one_kind_of_rule(self) -> DataPointRule:
        bounded = self.red_below is not None or self.red_above is not None
        if (self.red_when is not None) == bounded:
            raise ValueError(
                f"data point {self.name!r} needs either red_when or red_below/red_above, not both or neither"
            )
        if self.red_below is not None and self.red_above is not None and self.red_below > self.red_above:
            raise ValueError(
                f"data point {self.name!r}: red_below {self.red_below} is above red_above {self.red_above}"
            )
        return self


class DeviceHealthPipeline(Model):
    """Per device and data point a RED/GREEN state from declarative rules; triggers on GREEN -> RED."""

    kind: Literal["device_health"]
    source: FileSource
    sink: FileSink
    data_points: tuple[DataPointRule, ...] = Field(min_length=1)
    # Events older than the watermark (max event time - this) are dropped before the state.
    allowed_lateness_seconds: int = Field(600, ge=0)
    # A device+data point with no reading for this long (in event time) leaves the state; None keeps it.
    silent_ttl_seconds: int | None = Field(7 * 24 * 3600, gt=0)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"telemetry": self.source}

    @model_validator(mode="after")
    def _telemetry_fields_and_unique_rules(self) -> DeviceHealthPipeline:
        types = {f.name: f.type for f in self.source.fields}
        for name, wanted in DEVICE_HEALTH_FIELDS.items():
            if types.get(name) != wanted:
                raise ValueError(
                    f"source must declare field {name!r} of type {wanted}, got {types.get(name)}"
                )
        names = [rule.name for rule in self.data_points]
        if len(set(names)) != len(names):
            raise ValueError(f"data point names must be unique, got {names}")
        return self


Pipeline = Annotated[RouterPipeline | DeviceHealthPipeline, Field(discriminator="kind")]
