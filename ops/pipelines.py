"""The `pipeline` section of a job file: one frozen model per job kind.

Every pipeline kind has `kind` (the discriminator), `sink: FileSink` and an `inputs` property
(the name its transform knows each source by -> `FileSource`); `jobs/catalog.py` maps each kind to
its transform. A new kind adds its model here and to the `Pipeline` union at the bottom.
"""

from __future__ import annotations

import re
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


class ImpressionsPlaysPipeline(Model):
    """Joins each title impression to the plays of the same profile and title within the window after it."""

    kind: Literal["impressions_plays"]
    impressions: FileSource
    plays: FileSource
    sink: FileSink
    # Bounded out-of-orderness of both sources: each source's watermark trails its newest event time by this.
    allowed_lateness_seconds: int = Field(600, ge=0)
    # A play converts the impressions at most this long before it (both ends inclusive).
    conversion_window_seconds: int = Field(3600, gt=0)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"impressions": self.impressions, "plays": self.plays}

    @model_validator(mode="after")
    def _sources_carry_the_join_fields(self) -> ImpressionsPlaysPipeline:
        wanted = {
            "impressions": ("impression_id", "profile_id", "title_id"),
            "plays": ("play_id", "profile_id", "title_id"),
        }
        for name, source in self.inputs.items():
            types = {f.name: (f.type, f.required) for f in source.fields}
            for field_name in wanted[name]:
                if types.get(field_name) != ("string", True):
                    raise ValueError(f"{name} must have a required string field {field_name!r}")
            if types[source.event_time_field][1] is not True:
                raise ValueError(f"{name} event_time_field {source.event_time_field!r} must be required")
        return self


# Key fields of a sessionizer: types with an exact equality, so a key is the same key everywhere.
KEY_FIELD_TYPES: tuple[FieldType, ...] = ("string", "long", "boolean")


class SessionizerPipeline(Model):
    """Sessions per key over the union of several event sources (see `jobs/sessionizer/transform.py`).

    `gap_minutes`, `max_session_minutes` and `allowed_lateness_minutes` change results but not the
    state schema (a wrong value is fixed by a rewind); `key_fields` and `state_buckets` are fixed
    by the checkpoint.
    """

    kind: Literal["sessionizer"]
    sources: dict[str, FileSource] = Field(min_length=1)
    sink: FileSink
    key_fields: tuple[str, ...] = Field(("user_id",), min_length=1)
    event_id_field: str = "event_id"
    event_type_field: str = "event_type"
    gap_minutes: float = Field(30.0, gt=0, description="Inactivity that ends a session.")
    max_session_minutes: float = Field(
        240.0, gt=0, description="A session is cut at this length, however busy the key is."
    )
    allowed_lateness_minutes: float = Field(10.0, ge=0, description="The watermark delay.")
    watermark: Literal["union", "slowest_source"] = Field(
        "union",
        description="One watermark over the union of the sources (an idle source holds nothing "
        "back), or one per source combined by Spark's default min policy (a lagging source's "
        "events are never late, but an idle source stops the watermark).",
    )
    state_buckets: int = Field(64, ge=1, le=65536, description="Keys are hashed into this many state rows.")

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return dict(self.sources)

    @model_validator(mode="after")
    def _sources_carry_the_session_fields(self) -> SessionizerPipeline:
        if len(set(self.key_fields)) != len(self.key_fields):
            raise ValueError(f"key_fields must be unique, got {list(self.key_fields)}")
        key_types: dict[str, str] = {}
        for name, source in self.sources.items():
            if not re.match(r"^[a-z][a-z0-9_]*$", name):
                raise ValueError(f"source name {name!r} must be lower_snake_case")
            types = {f.name: f.type for f in source.fields}
            for field in (*self.key_fields, self.event_id_field, self.event_type_field):
                if field not in types:
                    raise ValueError(f"source {name!r} has no field {field!r}")
            for field in (self.event_id_field, self.event_type_field):
                if types[field] != "string":
                    raise ValueError(f"field {field!r} of source {name!r} must be a string")
            for field in self.key_fields:
                if types[field] not in KEY_FIELD_TYPES:
                    raise ValueError(
                        f"key field {field!r} of source {name!r} is a {types[field]}, "
                        f"not one of {KEY_FIELD_TYPES}"
                    )
                if key_types.setdefault(field, types[field]) != types[field]:
                    raise ValueError(f"key field {field!r} has different types across sources")
        return self


class WarehouseWriterPipeline(Model):
    """Product events into a Parquet warehouse partitioned by event-time date and hour."""

    kind: Literal["warehouse_writer"]
    source: FileSource
    sink: FileSink
    # Each micro-batch writes at most this many files into each date/hour partition.
    max_files_per_partition: int = Field(4, ge=1, le=256)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"events": self.source}


class ReferenceTable(Model):
    """A Parquet lookup table in the lake, republished while jobs read it (see `ops.reference_tables`)."""

    path: str = Field(description="Directory under the lake root holding the table's versions.")
    key: str = Field(description="The column events are matched on; unique per version.")
    fields: tuple[SourceField, ...] = Field(min_length=2, description="Every column, the key included.")

    @model_validator(mode="after")
    def _key_is_a_field(self) -> ReferenceTable:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("field names must be unique")
        if self.key not in names:
            raise ValueError(f"key {self.key!r} is not one of the fields {names}")
        return self


class EnricherPipeline(Model):
    """Joins events to a refreshed lookup table, then reshapes each event by a reloaded mapping file.

    See `jobs/enricher/transform.py`; the mapping file's format is in `jobs/enricher/mapping.py`.
    """

    kind: Literal["enricher"]
    source: FileSource
    sink: FileSink
    reference: ReferenceTable
    join_field: str = Field(description="The source field matched against `reference.key`.")
    mapping: str = Field(description="The mapping file, relative to the conf directory.")
    document_key: str = Field(
        "reference",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Where a matched row's fields are put in the document the mapping sees.",
    )

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"events": self.source}

    @model_validator(mode="after")
    def _join_is_consistent(self) -> EnricherPipeline:
        source_types = {f.name: f.type for f in self.source.fields}
        reference_types = {f.name: f.type for f in self.reference.fields}
        if self.join_field not in source_types:
            raise ValueError(f"join_field {self.join_field!r} is not a source field")
        if source_types[self.join_field] != reference_types[self.reference.key]:
            raise ValueError(
                f"join_field {self.join_field!r} is a {source_types[self.join_field]}, reference key "
                f"{self.reference.key!r} a {reference_types[self.reference.key]}"
            )
        clashes = sorted((set(reference_types) - {self.reference.key}) & set(source_types))
        if clashes:
            raise ValueError(f"reference fields {clashes} clash with source fields of the same name")
        return self


Pipeline = Annotated[
    RouterPipeline
    | ImpressionsPlaysPipeline
    | SessionizerPipeline
    | WarehouseWriterPipeline
    | EnricherPipeline,
    Field(discriminator="kind"),
]
