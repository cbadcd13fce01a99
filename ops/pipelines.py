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


def _require_string_fields(source: FileSource, names: tuple[str, ...], what: str) -> None:
    """Raise unless `source` declares each of `names` as a required string field."""
    declared = {f.name: (f.type, f.required) for f in source.fields}
    for name in names:
        if declared.get(name) != ("string", True):
            raise ValueError(f"{what} must have a required string field {name!r}")
    if declared[source.event_time_field][1] is not True:
        raise ValueError(f"{what} event_time_field {source.event_time_field!r} must be required")


class CampaignUniquesPipeline(Model):
    """Unique users per campaign per hour (exact and HyperLogLog), and each engagement enriched
    with the number of distinct campaigns its user engaged with in the sliding window ending
    at/after it."""

    kind: Literal["campaign_uniques"]
    source: FileSource
    sink: FileSink
    # Bounded out-of-orderness: the watermark trails the newest event time by this.
    allowed_lateness_seconds: int = Field(600, ge=0)
    # Tumbling window of the per-campaign unique counts.
    hour_seconds: int = Field(3600, gt=0)
    # Relative standard deviation of the HyperLogLog++ estimate (Spark requires < 0.4).
    approx_rsd: float = Field(0.05, gt=0.0, lt=0.4)
    # Sliding window of the per-user distinct-campaign count, and its slide.
    recent_window_seconds: int = Field(86400, gt=0)
    recent_slide_seconds: int = Field(3600, gt=0)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"engagements": self.source}

    @model_validator(mode="after")
    def _consistent(self) -> CampaignUniquesPipeline:
        _require_string_fields(self.source, ("event_id", "campaign_id", "user_id"), "source")
        if self.recent_window_seconds % self.recent_slide_seconds:
            raise ValueError("recent_window_seconds must be a multiple of recent_slide_seconds")
        return self


class SequenceRule(Model):
    """`first` followed by `then` on the same `key` within `within_seconds` (inclusive)."""

    kind: Literal["sequence"]
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    key: str = "host"
    first: str = Field(min_length=1, description="Spark SQL filter of the first event.")
    then: str = Field(min_length=1, description="Spark SQL filter of the following event.")
    within_seconds: int = Field(900, gt=0)


class ThresholdThenRule(Model):
    """At least `min_failures` `failure` events then a `success` on the same key, all within the window."""

    kind: Literal["threshold_then"]
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    key: str = "user_id"
    failure: str = Field(min_length=1)
    success: str = Field(min_length=1)
    min_failures: int = Field(5, ge=1)
    within_seconds: int = Field(300, gt=0)


class DistinctCountRule(Model):
    """One key touching at least `min_distinct` distinct `target` values within the window."""

    kind: Literal["distinct_count"]
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    key: str = "src_ip"
    filter: str = Field("true", min_length=1)
    target: str = "dst_ip"
    min_distinct: int = Field(10, ge=2)
    within_seconds: int = Field(300, gt=0)


PatternRule = Annotated[SequenceRule | ThresholdThenRule | DistinctCountRule, Field(discriminator="kind")]


class AttackChainsPipeline(Model):
    """Complex event patterns over security events, one stateful matcher per rule and key."""

    kind: Literal["attack_chains"]
    source: FileSource
    sink: FileSink
    allowed_lateness_seconds: int = Field(300, ge=0)
    rules: tuple[PatternRule, ...] = Field(min_length=1)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its transform knows them by."""
        return {"events": self.source}

    @model_validator(mode="after")
    def _rules_are_consistent(self) -> AttackChainsPipeline:
        _require_string_fields(self.source, ("event_id",), "source")
        known = {f.name for f in self.source.fields}
        names = [rule.name for rule in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique, got {names}")
        for rule in self.rules:
            fields = [rule.key] + ([rule.target] if isinstance(rule, DistinctCountRule) else [])
            unknown = [name for name in fields if name not in known]
            if unknown:
                raise ValueError(f"rule {rule.name!r} names unknown fields {unknown}")
        return self


Pipeline = Annotated[
    RouterPipeline | CampaignUniquesPipeline | AttackChainsPipeline, Field(discriminator="kind")
]
