"""The `pipeline` section of a job file: one frozen model per job kind.

Every pipeline kind has `kind` (the discriminator), `sink: FileSink`, an `inputs` property
(the name its transform knows each source by -> `FileSource`) and the `partition_columns` of its
sink, which the warehouse table of its output shares; `jobs/catalog.py` maps each kind to its
transform. A new kind adds its model here and to the `Pipeline` union at the bottom.

One module, over 500 lines, because the models are one closed union: each kind's model is short,
and a reader checking what a job file may say, or adding a kind, reads them side by side.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, JsonValue, model_validator

from ops.spec.model import Model

# Malformed events land in the job's sink under this route, beside the real routes.
DEAD_LETTER_ROUTE = "dead_letter"
# A dead letter's column of why it is one (null on every valid row of a sink).
DEAD_LETTER_REASON = "dead_letter_reason"
# The event-time columns every kind's sink is partitioned by last (`jobs.parsing` derives them).
EVENT_DATE = "event_date"
EVENT_HOUR = "event_hour"

FieldType = Literal["string", "long", "double", "boolean", "timestamp"]

# How a timestamp field's value is written, besides a datetime pattern (see `SourceField.format`).
TimeFormat = Literal["iso8601", "epoch_seconds", "epoch_millis", "epoch_micros"]
TIME_FORMATS: tuple[TimeFormat, ...] = ("iso8601", "epoch_seconds", "epoch_millis", "epoch_micros")
# Letters Spark's datetime parser accepts in a pattern: E, F, q, Q only format, and the week-based
# Y, w, W, u, e, c are refused since Spark 3 (docs: sql-ref-datetime-pattern). Spark itself checks
# the rest (counts of letters, quotes) when the query is planned (`jobs.parsing.invalid_time_formats`).
PATTERN_LETTERS = frozenset("GyDMLdahKkHmsSVzOXxZ")


class SourceField(Model):
    """One typed column read from each JSON line.

    `path` is where the value is in the line: the field's name by default, or a dotted path into
    nested objects (`device.id`). `format` says how a timestamp is written: `iso8601` (the
    default), `epoch_seconds`, `epoch_millis`, `epoch_micros`, or a Spark datetime pattern such
    as `dd/MM/yyyy HH:mm:ss`.
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: FieldType
    required: bool = False
    path: str | None = Field(
        None,
        min_length=1,
        description="Dotted path of the value in the JSON object ('device.id'); the name when absent.",
    )
    format: str | None = Field(
        None,
        min_length=1,
        description="Timestamp fields only: iso8601 (default), epoch_seconds, epoch_millis, "
        "epoch_micros, or a Spark datetime pattern ('yyyy-MM-dd HH:mm:ss').",
    )

    @property
    def json_path(self) -> tuple[str, ...]:
        """The keys leading to the value, outermost first."""
        return tuple((self.path or self.name).split("."))

    @property
    def time_format(self) -> str:
        """The timestamp format: one of `TIME_FORMATS` or a datetime pattern."""
        return self.format or "iso8601"

    @model_validator(mode="after")
    def _path_and_format_are_valid(self) -> SourceField:
        if self.path is not None and "" in self.path.split("."):
            raise ValueError(f"field {self.name!r}: path {self.path!r} has an empty key")
        if self.format is None:
            return self
        if self.type != "timestamp":
            raise ValueError(
                f"field {self.name!r}: format {self.format!r} applies to timestamp fields only, "
                f"not {self.type}"
            )
        if self.format not in TIME_FORMATS:
            problem = datetime_pattern_problem(self.format)
            if problem:
                raise ValueError(
                    f"field {self.name!r}: format {self.format!r} is not one of {', '.join(TIME_FORMATS)} "
                    f"nor a datetime pattern: {problem}"
                )
        return self


def datetime_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a Spark datetime pattern for parsing, or None if it may be.

    Checks letters and quotes; Spark has the last word when the query is planned.
    """
    letters: list[str] = []
    quoted = False
    for char in pattern:
        if char == "'":
            quoted = not quoted
        elif not quoted and char.isascii() and char.isalpha():
            letters.append(char)
    if quoted:
        return "a quote (') is not closed"
    refused = sorted(set(letters) - PATTERN_LETTERS)
    if refused:
        return f"pattern letters {refused} cannot parse (use {''.join(sorted(PATTERN_LETTERS))})"
    if not letters:
        return "it has no pattern letters"
    return None


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


class PipelineModel(Model):
    """What every pipeline kind tells the warehouse and a backfill about its output.

    `partition_columns`: the sink's and the warehouse table's partition columns, in order: the
    column that tells the kind's outputs apart (a route, an outcome), then `event_date` and, for
    hourly partitions, `event_hour`. `event_partition_hours`: the event-time span of one partition
    (1 with `event_hour`, 24 with `event_date` alone). `backfill_reach`: how far from an
    event's time the rows it can change may lie (0 for a stateless kind, a session's length for
    the sessionizer), or None when the kind's state bounds it by nothing a backfill can know; then
    every arrival hour may feed every partition, and only a backfill of the whole archive
    recomputes a partition whole (`ops.backfill.coverage`).
    """

    # A built-in kind's partition columns; a job of the team's own code declares its own.
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ()

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.fixed_partition_columns

    @property
    def event_partition_hours(self) -> int:
        return 1 if EVENT_HOUR in self.partition_columns else 24

    def backfill_reach(self) -> timedelta | None:
        return None


class StatelessPipeline(PipelineModel):
    """A kind whose every row comes from one event: it reaches no further than that event's time."""

    def backfill_reach(self) -> timedelta | None:
        return timedelta(0)


class Route(Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    filter: str = Field(min_length=1, description="A Spark SQL boolean expression over the source fields.")
    columns: tuple[str, ...] = Field(min_length=1)


class ScriptUdf(Model):
    """A vectorized Python function a router's filters or a SQL job's query call by `name`:
    `function` of the Python file `file` (absolute, or relative to the job file's directory; the
    loader makes it absolute), called with a pandas Series per argument and returning one of
    Spark type `returns` (DDL: `double`, `string`, `array<string>`). The file may change while
    the job runs: each batch runs the version it found at its start (`jobs.script_udfs`)."""

    name: str = Field(pattern=r"^[a-z_][a-z0-9_]*$")
    file: str = Field(min_length=1)
    function: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    returns: str = Field(min_length=1, description="the Spark type of the result, in DDL")

    def file_path(self, jobs_dir: Path) -> Path:
        """The file, a relative `file` taken from the job file's directory."""
        return Path(self.file) if Path(self.file).is_absolute() else (jobs_dir / self.file).resolve()


class ScriptUdfs(Model):
    """The mixin of the kinds whose expressions may call script UDFs."""

    udfs: tuple[ScriptUdf, ...] = ()

    @model_validator(mode="after")
    def _udf_names_are_unique(self) -> ScriptUdfs:
        names = [udf.name for udf in self.udfs]
        if len(set(names)) != len(names):
            raise ValueError(f"udf names must be unique, got {names}")
        return self


class RouterPipeline(StatelessPipeline, ScriptUdfs):
    kind: Literal["router"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("route", EVENT_DATE, EVENT_HOUR)
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


class ImpressionsPlaysPipeline(PipelineModel):
    """Joins each title impression to the plays of the same profile and title within the window after it."""

    kind: Literal["impressions_plays"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("outcome", EVENT_DATE, EVENT_HOUR)
    impressions: FileSource
    plays: FileSource
    sink: FileSink
    # Bounded out-of-orderness of both sources: each source's watermark trails its newest event time by this.
    allowed_lateness_seconds: int = Field(600, ge=0)
    # A play converts the impressions at most this long before it (both ends inclusive).
    conversion_window_seconds: int = Field(3600, gt=0)
    # Fixed by the checkpoint (see `jobs/impressions_plays/transform.py`).
    state_buckets: int = Field(64, ge=1, le=65536, description="Keys are hashed into this many state rows.")

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


class SessionizerPipeline(PipelineModel):
    """Sessions per key over the union of several event sources (see `jobs/sessionizer/transform.py`).

    `gap_minutes`, `max_session_minutes` and `allowed_lateness_minutes` change results but not the
    state schema (a wrong value is fixed by a rewind); `key_fields` and `state_buckets` are fixed
    by the checkpoint.
    """

    kind: Literal["sessionizer"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("output", EVENT_DATE)
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

    def backfill_reach(self) -> timedelta | None:
        """A session's events lie within its length of its start, and an event joins a session
        within a gap of its neighbours: farther than that, no event changes another's session.
        (A key busy without a gap for longer is cut by the cap, and its cuts are not followed.)"""
        return timedelta(minutes=self.max_session_minutes + self.gap_minutes)

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


def _require_string_fields(source: FileSource, names: tuple[str, ...], what: str) -> None:
    """Raise unless `source` declares each of `names` as a required string field."""
    declared = {f.name: (f.type, f.required) for f in source.fields}
    for name in names:
        if declared.get(name) != ("string", True):
            raise ValueError(f"{what} must have a required string field {name!r}")
    if declared[source.event_time_field][1] is not True:
        raise ValueError(f"{what} event_time_field {source.event_time_field!r} must be required")


class CampaignUniquesPipeline(PipelineModel):
    """Unique users per campaign per hour (exact and HyperLogLog), and each engagement enriched
    with the number of distinct campaigns its user engaged with in the sliding window ending
    at/after it."""

    kind: Literal["campaign_uniques"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("output", EVENT_DATE)
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
    # Fixed by the checkpoint (see `jobs/campaign_uniques/transform.py`).
    state_buckets: int = Field(64, ge=1, le=65536, description="Users are hashed into this many state rows.")

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


class AttackChainsPipeline(PipelineModel):
    """Complex event patterns over security events, one stateful matcher per rule and key."""

    kind: Literal["attack_chains"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("output", EVENT_DATE)
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


class DeviceHealthPipeline(PipelineModel):
    """Per device and data point a RED/GREEN state from declarative rules; triggers on GREEN -> RED."""

    kind: Literal["device_health"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("output", EVENT_DATE, EVENT_HOUR)
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


class ReferenceTable(Model):
    """A Parquet lookup table in the lake, republished while jobs read it (`ops.driver.reference_tables`)."""

    path: str = Field(description="Directory under the lake root holding the table's versions.")
    key: str = Field(description="The column events are matched on; unique per version.")
    fields: tuple[SourceField, ...] = Field(min_length=2, description="Every column, the key included.")

    @model_validator(mode="after")
    def _key_is_a_field(self) -> ReferenceTable:
        for field in self.fields:
            if field.path is not None or field.format is not None:
                raise ValueError(f"field {field.name!r}: a reference table's columns take no path or format")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("field names must be unique")
        if self.key not in names:
            raise ValueError(f"key {self.key!r} is not one of the fields {names}")
        return self


class EnricherPipeline(StatelessPipeline):
    """Joins events to a refreshed lookup table, then reshapes each event by a reloaded mapping file.

    See `jobs/enricher/transform.py`; the mapping file's format is in `jobs/enricher/mapping.py`.
    """

    kind: Literal["enricher"]
    fixed_partition_columns: ClassVar[tuple[str, ...]] = ("route", EVENT_DATE, EVENT_HOUR)
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


# `package.module:function`, the way Python entry points are written.
ENTRYPOINT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
# A model store name (`ops.models`): a lower-case identifier.
MODEL_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"


class ViewOutput(Model):
    """A view the platform publishes from the job's sink (`ops.views`): the sink is the view's
    changelog, each row the new `value` of its `key` (a null value deletes the key), at most one
    row of a key per batch."""

    key: str = Field(min_length=1, description="The column whose value names the view's key.")
    value: str = Field(min_length=1, description="The column holding the key's new value; null deletes it.")


class TeamPipeline(PipelineModel):
    """What a team's own job declares besides its logic (`kind: python` or `sql`,
    `jobs.user_code`): its named `sources`, its `sink`, and the sink's `partition_columns`: the
    team's own columns, then `event_date` and, for hourly partitions, `event_hour`, which the
    warehouse judges a partition closed by. With `view`, the platform also publishes the sink's
    rows as a key-value view in PostgreSQL (`ops.views`)."""

    sources: dict[str, FileSource] = Field(min_length=1)
    sink: FileSink
    declared_partition_columns: tuple[str, ...] = Field(alias="partition_columns", min_length=1)
    # How far from an event's time the rows it changes may lie, when the job knows (0 when every
    # row comes from one event and is partitioned by that event's time): a backfill of part of the
    # archive then recomputes the partitions within it whole (`PipelineModel.backfill_reach`).
    backfill_reach_minutes: float | None = Field(None, ge=0)
    view: ViewOutput | None = None

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.declared_partition_columns

    def backfill_reach(self) -> timedelta | None:
        minutes = self.backfill_reach_minutes
        return None if minutes is None else timedelta(minutes=minutes)

    @property
    def inputs(self) -> dict[str, FileSource]:
        """The job's sources by the name its logic knows them by."""
        return self.sources

    @model_validator(mode="after")
    def _partitions_end_in_event_time(self) -> TeamPipeline:
        columns = self.declared_partition_columns
        event_columns = (EVENT_DATE, EVENT_HOUR) if columns[-1:] == (EVENT_HOUR,) else (EVENT_DATE,)
        own = columns[: -len(event_columns)]
        if columns[-len(event_columns) :] != event_columns or {EVENT_DATE, EVENT_HOUR} & set(own):
            raise ValueError(
                f"partition_columns {list(columns)} must end in {EVENT_DATE!r} or {EVENT_DATE!r}, "
                f"{EVENT_HOUR!r} (and name neither elsewhere): the warehouse closes a partition by "
                "its event time"
            )
        if len(set(own)) != len(own):
            raise ValueError(f"partition_columns {list(columns)} name a column twice")
        for name in self.sources:
            if not name.isidentifier():
                raise ValueError(f"source name {name!r} must be an identifier")
        if self.view is not None and {self.view.key, self.view.value} & set(columns):
            # A partition column's value lives in the file's directory, not in the file the
            # publisher reads.
            raise ValueError(f"view key and value must not be partition columns ({list(columns)})")
        return self


class ModelRef(Model):
    """A model version of the model store (`ops.models`) that a job's code scores with: pinned
    here, so a new version is deployed through `warden upgrade` like any change of the job."""

    name: str = Field(pattern=MODEL_NAME_PATTERN)
    version: int = Field(ge=1)


class PythonPipeline(TeamPipeline):
    """A job of PySpark code (`kind: python`): `entrypoint` (`package.module:function`) is
    imported from the directory `code` (absolute, or relative to the job file's directory; the
    loader makes it absolute) and called with the parsed `sources` by name and a read-only context
    holding `parameters` and the `models` (by the name the code knows each by). Without `code`,
    the entrypoint is one of the platform's own packages: a job that ships with the platform,
    whose code's version is the platform's."""

    kind: Literal["python"]
    code: str | None = Field(None, min_length=1, description="The directory the entrypoint is imported from.")
    entrypoint: str = Field(pattern=ENTRYPOINT_PATTERN, description="package.module:function")
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    models: dict[str, ModelRef] = Field(
        default_factory=dict, description="name the code uses -> a model store version"
    )

    def code_dir(self, jobs_dir: Path) -> Path | None:
        """The code directory, a relative `code` taken from the job file's directory."""
        if self.code is None:
            return None
        return Path(self.code) if Path(self.code).is_absolute() else (jobs_dir / self.code).resolve()


class SqlPipeline(TeamPipeline, ScriptUdfs):
    """A job that is one Spark SQL query (`kind: sql`) over its `sources`, each a view under its
    name; a source named in `watermarks` gets a watermark that trails its newest event time by
    that many minutes (a windowed aggregation or a stream-stream join needs one)."""

    kind: Literal["sql"]
    query: str = Field(min_length=1, description="Spark SQL over the sources, each a view under its name.")
    watermarks: dict[str, float] = Field(
        default_factory=dict, description="source -> allowed lateness, minutes"
    )

    @model_validator(mode="after")
    def _watermarks_name_sources(self) -> SqlPipeline:
        unknown = sorted(set(self.watermarks) - set(self.sources))
        if unknown:
            raise ValueError(f"watermarks name {unknown}, which are not sources ({sorted(self.sources)})")
        negative = sorted(name for name, minutes in self.watermarks.items() if minutes < 0)
        if negative:
            raise ValueError(f"watermarks of {negative} are negative")
        return self


# The pipeline kinds whose transform keeps its state as one transformWithState value state: the
# state `warden state` reads (ops.recovery.state_reader) and the job board looks up by key. The
# value is the key column a lookup matches, the first of the state's key columns (the transform's
# grouping key, e.g. `KEY_COLUMNS` in jobs/device_health/transform.py).
STATE_LOOKUP_KEYS = {"device_health": "device_id"}

Pipeline = Annotated[
    RouterPipeline
    | ImpressionsPlaysPipeline
    | SessionizerPipeline
    | CampaignUniquesPipeline
    | AttackChainsPipeline
    | DeviceHealthPipeline
    | EnricherPipeline
    | PythonPipeline
    | SqlPipeline,
    Field(discriminator="kind"),
]
