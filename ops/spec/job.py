"""Typed, frozen models of a job file (`conf/jobs/<name>.yaml`: `pipeline` + `operations`) and its loader.

Every model forbids unknown keys. Loading validates the whole file and raises one `ConfigError`
naming the file and the dotted path of the first bad field, so nothing is launched from a file
that does not validate. Fields that only make sense together are checked together: the first
restart backoff is at most the longest, a stuck grace outlasts the gap between an idle query's
progress events, savepoint retention keeps what a scheduled restatement needs.

Job files end in `.yaml`. A `.yml` file in `conf/jobs/` is reported as an error naming it (a
silently ignored job is worse than a refused one); other names (editor backups) are ignored.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from croniter import croniter
from pydantic import AfterValidator, Field, StrictBool, ValidationError, field_validator, model_validator

from ops.exceptions import ConfigError
from ops.spec.code import code_digest
from ops.spec.model import Model, describe_error, read_yaml
from ops.spec.pipelines import STATE_LOOKUP_KEYS, Pipeline, PythonPipeline, ScriptUdfs
from ops.spec.platform import SparkDefaults, conf_dir

JOB_NAME_PATTERN = r"^[a-z][a-z0-9_]{1,62}$"
JOB_FILE_SUFFIX = ".yaml"
# Refused with a message instead of being ignored: the usual other spelling of the suffix.
REFUSED_JOB_FILE_SUFFIXES = (".yml",)
# Spark's `spark.sql.streaming.noDataProgressEventInterval` default: an idle query reports progress
# (our heartbeat) at most this often, so a shorter stuck limit calls an idle job stuck.
IDLE_PROGRESS_INTERVAL_SECONDS = 10.0


# --- job specs -----------------------------------------------------------------------------------


def _valid_cron(value: str) -> str:
    if not croniter.is_valid(value):
        raise ValueError(f"not a valid cron expression: {value!r}")
    return value


Cron = Annotated[str, AfterValidator(_valid_cron)]


class Resources(Model):
    master: str | None = Field(None, description="A Spark master URL for this job; null: the platform's.")
    cores: int | None = Field(
        None,
        ge=1,
        description="Cores the job runs with: local[N] threads, or spark.cores.max on a cluster; null: "
        "the master's own (local[N] as written, every free core of a cluster).",
    )
    driver_memory: str = "1g"
    executor_memory: str = Field("1g", description="Memory of each executor on a cluster.")
    shuffle_partitions: int = Field(4, ge=1)

    def runs_locally(self, spark: SparkDefaults) -> bool:
        """Whether the job's tasks run in its driver (a local master) rather than in executors."""
        return (self.master or spark.master_url).startswith("local")

    def task_memory(self, spark: SparkDefaults) -> str:
        """The memory the job's tasks run in: the driver's in local mode, an executor's on a cluster."""
        return self.driver_memory if self.runs_locally(spark) else self.executor_memory

    def with_task_memory(self, spark: SparkDefaults, memory: str) -> Resources:
        """These resources with `memory` for the job's tasks (`task_memory`)."""
        return self.model_copy(
            update={"driver_memory" if self.runs_locally(spark) else "executor_memory": memory}
        )

    def spark_master(self, spark: SparkDefaults) -> tuple[str, dict[str, str]]:
        """The master URL a driver of this job connects to, and the confs that size it there.

        Locally the cores are the threads of `local[N]`; on a standalone cluster each executor
        has one core, so the job gets `cores` executors of `executor_memory` (spark.cores.max).
        """
        master = self.master or spark.master_url
        if self.runs_locally(spark):
            return (f"local[{self.cores}]" if self.cores else master), {}
        conf = {"spark.executor.cores": "1", "spark.executor.memory": self.executor_memory}
        if self.cores:
            conf["spark.cores.max"] = str(self.cores)
        return master, conf


class TriggerConfig(Model):
    interval_seconds: float = Field(5.0, gt=0)
    max_files_per_trigger: int | None = Field(None, ge=1)


class HealthThresholds(Model):
    stuck_grace_seconds: float = Field(30.0, gt=0)
    startup_grace_seconds: float = Field(90.0, gt=0)
    falling_behind_window_batches: int = Field(5, ge=2)
    max_state_memory_mb: float | None = Field(
        None, gt=0, description="State memory (all stateful operators) that degrades the job; null: no limit."
    )
    max_watermark_lag_seconds: float | None = Field(
        None,
        gt=0,
        description="How far the event-time watermark may trail the wall clock; null: no limit "
        "(replayed or historical input always lags).",
    )


class RestartPolicy(Model):
    initial_backoff_seconds: float = Field(2.0, ge=0)
    max_backoff_seconds: float = Field(300.0, gt=0)
    budget: int = Field(5, ge=1, description="Restarts allowed before the job counts as a storm.")
    stable_batches: int = Field(3, ge=1)
    stable_seconds: float = Field(600.0, ge=0)
    warm_standby: StrictBool = Field(
        False,
        description="Keep a second driver with its JVM and SparkSession up, idle, that takes over the "
        "checkpoint when the supervisor finds the active driver dead (true or false).",
    )
    on_change: StrictBool = Field(
        False,
        description="Restart the driver when the job's config version changes (its file or, for a "
        "job of the team's code, that code), picking up the change without `warden upgrade`'s dry "
        "run and rollback (true or false).",
    )

    @model_validator(mode="after")
    def _backoff_grows_to_its_maximum(self) -> RestartPolicy:
        if self.initial_backoff_seconds > self.max_backoff_seconds:
            raise ValueError(
                f"initial_backoff_seconds {self.initial_backoff_seconds:g} is larger than "
                f"max_backoff_seconds {self.max_backoff_seconds:g}"
            )
        return self


class AlertRouting(Model):
    channel: str = "#streams-oncall"
    runbook: str = "ops/runbooks/README.md"


class SavepointPolicy(Model):
    """Periodic savepoints taken by the supervisor while the job runs, and how many to keep."""

    interval_minutes: float | None = Field(
        60.0, gt=0, description="Minutes between periodic savepoints; null turns them off."
    )
    keep_count: int = Field(5, ge=1, description="Savepoints kept; the newest good one always is.")
    max_age_hours: float = Field(7 * 24.0, gt=0, description="Older savepoints are deleted.")

    @model_validator(mode="after")
    def _retention_outlasts_the_interval(self) -> SavepointPolicy:
        # Otherwise each savepoint is too old to keep once the next is taken: keep_count never counts.
        if self.interval_minutes is not None and self.max_age_hours * 60 < self.interval_minutes:
            raise ValueError(
                f"max_age_hours {self.max_age_hours:g} is shorter than interval_minutes "
                f"{self.interval_minutes:g}: every savepoint but the newest would be deleted before the "
                "next one is taken (set keep_count: 1 to keep only the newest)"
            )
        return self


class RestatementSchedule(Model):
    """A scheduled restatement: rewind to the newest savepoint taken `lookback_hours` before the
    run and recompute everything after it with the current code (late fixes, reference data)."""

    cron: Cron = Field(description="When, as a cron expression in UTC, e.g. '0 3 * * *'.")
    lookback_hours: float = Field(24.0, gt=0)


class PreviewTaps(Model):
    """Preview taps (`warden preview`): the newest records at named stages of the job's transform.

    Each tapped stage costs one extra small query (see `jobs/preview.py`); no stages, no cost.
    """

    stages: tuple[str, ...] = Field((), description="Stages to tap, e.g. [parsed, output].")
    records: int = Field(100, ge=1, le=10_000, description="Records kept per stage, the newest.")


class AutoscalingPolicy(Model):
    """How `ops.control.autoscaler` sizes the job (docs/architecture.md §6); `off` by default."""

    mode: Literal["off", "recommend", "apply"] = Field(
        "off", description="recommend: record decisions only; apply: also rescale the driver."
    )
    min_cores: int = Field(1, ge=1)
    max_cores: int = Field(4, ge=1)
    target_utilization: float = Field(
        0.7, gt=0, le=1, description="Share of each trigger interval the job should be busy."
    )
    catch_up_seconds: float = Field(300.0, gt=0, description="Time to drain a backlog in.")
    stabilization_seconds: float = Field(
        60.0, gt=0, description="Metrics window a decision needs, and the quiet time after a rescale."
    )
    scale_down_delay_seconds: float = Field(
        600.0, ge=0, description="How long a lower recommendation must hold before cores are taken away."
    )
    max_factor_per_step: float = Field(2.0, gt=1, description="Largest change of cores in one rescale.")

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> AutoscalingPolicy:
        if self.min_cores > self.max_cores:
            raise ValueError(f"min_cores {self.min_cores} is larger than max_cores {self.max_cores}")
        return self


class Expectation(Model):
    """One Great Expectations check of a compacted partition, e.g.
    `{expectation: expect_column_values_to_be_between, kwargs: {column: amount, min_value: 0}}`."""

    expectation: str = Field(pattern=r"^expect_[a-z_]+$", description="A GX Core expectation, snake_case.")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    severity: Literal["block", "warn"] = Field(
        "block", description="block: nothing is published; warn: published, and Slack is warned."
    )


class QualitySuite(Model):
    """The audit a compacted partition passes before it is published (`ops.warehouse.audit`).

    Every job also gets the built-in checks: the row count equals the partition's committed rows,
    `keys` are never null, `unique` columns have no duplicates.
    """

    keys: tuple[str, ...] = Field((), description="Columns that must never be null.")
    unique: tuple[str, ...] = Field((), description="Columns (e.g. event_id) without duplicates.")
    expectations: tuple[Expectation, ...] = ()


class CompactionPolicy(Model):
    """Nightly write-audit-publish of the job's closed sink partitions into its warehouse table."""

    schedule: Cron = Field("0 2 * * *", description="When, as a cron expression in UTC.")
    closed_after_hours: float = Field(
        2.0, gt=0, description="A partition is closed (compacted) this long after its hour ends."
    )
    target_file_mb: float = Field(128.0, gt=0, description="Size of the compacted Parquet files.")
    sink_retention_hours: float | None = Field(
        None,
        gt=0,
        description=(
            "The rewind horizon of the sink: a published partition's raw files and sink-log entries "
            "expire this long after its hour ends (null: the sink keeps them for ever). Rewinds and "
            "restatements to a savepoint that lists expired files are refused."
        ),
    )

    @model_validator(mode="after")
    def _expires_after_closing(self) -> CompactionPolicy:
        retention = self.sink_retention_hours
        if retention is not None and retention < self.closed_after_hours:
            raise ValueError(
                f"compaction.sink_retention_hours {retention:g} is shorter than closed_after_hours "
                f"{self.closed_after_hours:g}: a partition's raw files would expire before it is compacted"
            )
        return self


class OutputShiftCheck(Model):
    """An upgrade's check of what the candidate computes against what the running version does
    (`warden upgrade`'s dry run, `jobs.output_shift`): both versions compute the rows of the input
    the newest batch of the upgrade's savepoint read, and the candidate is refused when the
    distribution of `column` moved by more than `max_shift`, the two-sample Kolmogorov-Smirnov
    statistic (the largest gap between the two cumulative distributions: 0 for the same values,
    1 for ranges that do not overlap)."""

    column: str = Field(min_length=1, description="A numeric output column, e.g. a model's score.")
    max_shift: float = Field(0.1, gt=0, le=1)


class UpgradePolicy(Model):
    """What `warden upgrade` checks besides the candidate's taking over the job's state."""

    output_check: OutputShiftCheck | None = None


class Operations(Model):
    stateful: bool = False
    # Stateful jobs keep state in RocksDB; format 2 loads state by the ids in the commit log.
    checkpoint_format: Literal[1, 2] = 2
    resources: Resources = Field(default_factory=Resources)
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    metrics_port: int = Field(ge=1024, le=65535)
    health: HealthThresholds = Field(default_factory=HealthThresholds)
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    alerts: AlertRouting = Field(default_factory=AlertRouting)
    savepoints: SavepointPolicy = Field(default_factory=SavepointPolicy)
    restatement: RestatementSchedule | None = None
    shutdown_timeout_seconds: float = Field(60.0, gt=0)
    preview: PreviewTaps = Field(default_factory=PreviewTaps)
    autoscaling: AutoscalingPolicy = Field(default_factory=AutoscalingPolicy)
    compaction: CompactionPolicy | None = None
    quality: QualitySuite = Field(default_factory=QualitySuite)
    upgrade: UpgradePolicy = Field(default_factory=UpgradePolicy)

    @model_validator(mode="after")
    def _fields_agree(self) -> Operations:
        # The startup grace has no such relation: the first heartbeat ("started") is written when
        # the query starts, whatever the trigger interval.
        interval, grace = self.trigger.interval_seconds, self.health.stuck_grace_seconds
        idle_gap = math.ceil(IDLE_PROGRESS_INTERVAL_SECONDS / interval) * interval
        if interval + grace <= idle_gap:
            raise ValueError(
                f"health.stuck_grace_seconds {grace:g} is too short for trigger.interval_seconds "
                f"{interval:g}: an idle query reports progress only every {idle_gap:g} s, so the stuck "
                f"limit (interval + grace = {interval + grace:g} s) would call an idle job stuck"
            )
        if self.restatement is not None:
            self._savepoints_cover(self.restatement.lookback_hours)
        scaling, partitions = self.autoscaling, self.resources.shuffle_partitions
        # A stateful job's tasks per stage are its state partitions, fixed by the checkpoint: cores
        # beyond them would sit idle.
        if self.stateful and scaling.mode != "off" and scaling.max_cores > partitions:
            raise ValueError(
                f"autoscaling.max_cores {scaling.max_cores} is more than resources.shuffle_partitions "
                f"{partitions}: a stateful job cannot use more cores than its state partitions, which "
                "the checkpoint fixes"
            )
        return self

    def _savepoints_cover(self, lookback_hours: float) -> None:
        """Raise unless retention keeps a savepoint `lookback_hours` old to restate from."""
        savepoints, lookback_minutes = self.savepoints, lookback_hours * 60
        if savepoints.interval_minutes is None:
            raise ValueError(
                "restatement needs periodic savepoints to restate from, "
                "but savepoints.interval_minutes is null"
            )
        if savepoints.max_age_hours < lookback_hours:
            raise ValueError(
                f"restatement.lookback_hours {lookback_hours:g} is longer than savepoints.max_age_hours "
                f"{savepoints.max_age_hours:g}: retention deletes every savepoint old enough to restate from"
            )
        # The oldest of keep_count savepoints taken every interval is (keep_count - 1) intervals old.
        covered_minutes = (savepoints.keep_count - 1) * savepoints.interval_minutes
        if covered_minutes < lookback_minutes:
            raise ValueError(
                f"restatement.lookback_hours {lookback_hours:g} is longer than savepoints.keep_count "
                f"{savepoints.keep_count} savepoints every {savepoints.interval_minutes:g} min reach back "
                f"({covered_minutes / 60:g} h): raise keep_count to at least "
                f"{math.ceil(lookback_minutes / savepoints.interval_minutes) + 1}"
            )


class JobSpec(Model):
    """One job: what it computes (`pipeline`) and how it is run (`operations`)."""

    name: str = Field(pattern=JOB_NAME_PATTERN)
    description: str = ""
    pipeline: Pipeline
    operations: Operations
    # Filled by the loader: a digest of the file, recorded with every run.
    config_version: str = Field(default="", exclude=True)

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return " ".join(value.split())

    def with_scale(self, cores: int | None, max_files_per_trigger: int | None) -> JobSpec:
        """This spec at another scale (`ops.control.scaling`): its cores and batch-size limit
        replaced, its config version kept (the file is the same; the run records the scale)."""
        operations = self.operations
        resources = operations.resources.model_copy(update={"cores": cores})
        trigger = operations.trigger.model_copy(update={"max_files_per_trigger": max_files_per_trigger})
        scaled = operations.model_copy(update={"resources": resources, "trigger": trigger})
        return self.model_copy(update={"operations": scaled})

    @property
    def state_lookup_key(self) -> str | None:
        """The state key column a lookup by key matches, or None when the job's state cannot be
        looked up (it keeps none, or not as the one value state `warden state` reads)."""
        return STATE_LOOKUP_KEYS.get(self.pipeline.kind) if self.operations.stateful else None


METRICS_PORT_FIELD = "operations.metrics_port"
# What every account of a taken metrics port says, so a closed run's exit reason can be recognised.
METRICS_PORT_IN_USE = "is in use by another process"


def metrics_port_in_use(spec: JobSpec) -> str:
    """The configuration problem of a job whose metrics port another process holds: the job, the
    port and the field, said alike by the supervisor before a launch and by a driver that finds
    the port taken."""
    return (
        f"field '{METRICS_PORT_FIELD}': port {spec.operations.metrics_port} of job {spec.name!r} "
        f"{METRICS_PORT_IN_USE} on 127.0.0.1; the job is not launched until the port is free or "
        "the job file names another"
    )


# --- loading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobLoadResult:
    """What loading `conf/jobs/` found: the valid specs and one error per invalid file."""

    specs: dict[str, JobSpec]
    errors: dict[Path, ConfigError]


def load_job(path: Path, jobs_dir: Path | None = None) -> JobSpec:
    """Load and validate one job file; its `name` must match the file name.

    Its config version is a digest of the file and, for a job of the team's own code, of that
    code (`ops.spec.code`), whose directory the spec then names absolutely, as it names the files
    of script UDFs. Relative paths are taken from `jobs_dir`, by default the file's directory (a
    copy of a file checked elsewhere, an upgrade's candidate, gives the directory it is for)."""
    jobs_dir = jobs_dir or path.parent
    document, raw = read_yaml(path)
    try:
        spec = JobSpec.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(path, describe_error(exc)) from exc
    if spec.name != path.stem:
        raise ConfigError(path, f"field 'name': {spec.name!r} must match the file name {path.stem!r}")
    digest = hashlib.sha256(raw)
    pipeline = spec.pipeline
    code = pipeline.code_dir(jobs_dir) if isinstance(pipeline, PythonPipeline) else None
    if code is not None:
        if not code.is_dir():
            raise ConfigError(path, f"field 'pipeline.code': {code} is not a directory")
        digest.update(code_digest(code).encode())
        spec = spec.model_copy(update={"pipeline": pipeline.model_copy(update={"code": str(code)})})
    if isinstance(pipeline, ScriptUdfs) and pipeline.udfs:
        spec = spec.model_copy(update={"pipeline": _with_udf_files(spec.pipeline, path, jobs_dir)})
    return spec.model_copy(update={"config_version": digest.hexdigest()[:12]})


def anchor_paths(document: Any, conf_dir: Path) -> Any:
    """A job file's document with the paths it may give relative to its conf dir made absolute:
    a python job's `code` and script UDFs' `file` (relative to `conf/jobs/`), the enricher's
    `mapping` (relative to `conf/`). For a copy of the file written to another conf dir (an
    upgrade's dry run). Any other document is returned as it is, for the model to judge."""
    pipeline = document.get("pipeline") if isinstance(document, dict) else None
    if not isinstance(pipeline, dict):
        return document

    def anchored(value: Any, base: Path) -> Any:
        return str(base / value) if isinstance(value, str) and not Path(value).is_absolute() else value

    pipeline = dict(pipeline)
    for key, base in (("code", conf_dir / "jobs"), ("mapping", conf_dir)):
        if key in pipeline:
            pipeline[key] = anchored(pipeline[key], base)
    if isinstance(pipeline.get("udfs"), list):
        pipeline["udfs"] = [
            {**udf, "file": anchored(udf.get("file"), conf_dir / "jobs")} if isinstance(udf, dict) else udf
            for udf in pipeline["udfs"]
        ]
    return {**document, "pipeline": pipeline}


def _with_udf_files(pipeline: Any, path: Path, jobs_dir: Path) -> Any:
    """The pipeline with its script UDFs' files named absolutely. Their contents are not part of
    the config version: a UDF file may change while its job runs (`jobs.script_udfs`)."""
    udfs = []
    for index, udf in enumerate(pipeline.udfs):
        file = udf.file_path(jobs_dir)
        if not file.is_file():
            raise ConfigError(path, f"field 'pipeline.udfs.{index}.file': {file} is not a file")
        udfs.append(udf.model_copy(update={"file": str(file)}))
    return pipeline.model_copy(update={"udfs": tuple(udfs)})


def job_files(directory: Path | None = None) -> Iterator[Path]:
    """The job files in `conf/jobs/`, sorted by name."""
    jobs_dir = (directory or conf_dir()) / "jobs"
    return iter(sorted(jobs_dir.glob(f"*{JOB_FILE_SUFFIX}")))


def job_file(name: str, directory: Path | None = None) -> Path:
    """Where the file of job `name` is (whether or not it exists)."""
    return (directory or conf_dir()) / "jobs" / f"{name}{JOB_FILE_SUFFIX}"


def _refused_file_error(path: Path) -> ConfigError:
    return ConfigError(
        path,
        f"job files end in {JOB_FILE_SUFFIX}, so this file is not loaded: rename it to "
        f"{path.stem}{JOB_FILE_SUFFIX}",
    )


def refused_job_files(directory: Path | None = None) -> dict[Path, ConfigError]:
    """Files in `conf/jobs/` that look like job files under another suffix (`.yml`), each with
    the error that says so."""
    jobs_dir = (directory or conf_dir()) / "jobs"
    return {
        path: _refused_file_error(path)
        for suffix in REFUSED_JOB_FILE_SUFFIXES
        for path in sorted(jobs_dir.glob(f"*{suffix}"))
    }


def load_jobs(directory: Path | None = None) -> JobLoadResult:
    """Load every job file; an invalid file is reported, the others still load. So is a job file
    under a refused suffix (`.yml`): it is never loaded, but never silently."""
    specs: dict[str, JobSpec] = {}
    errors: dict[Path, ConfigError] = refused_job_files(directory)
    ports: dict[int, str] = {}
    for path in job_files(directory):
        try:
            spec = load_job(path)
        except ConfigError as exc:
            errors[path] = exc
            continue
        port = spec.operations.metrics_port
        if port in ports:
            errors[path] = ConfigError(
                path, f"field 'operations.metrics_port': {port} is already used by job {ports[port]!r}"
            )
            continue
        ports[port] = spec.name
        specs[spec.name] = spec
    return JobLoadResult(specs=specs, errors=errors)


def find_job(name: str, directory: Path | None = None) -> JobSpec:
    """Load the spec of one job by name."""
    if not re.match(JOB_NAME_PATTERN, name):
        raise ConfigError(Path(name), f"{name!r} is not a valid job name")
    path = job_file(name, directory)
    if not path.exists():
        refused = [p for p in map(path.with_suffix, REFUSED_JOB_FILE_SUFFIXES) if p.exists()]
        if refused:
            raise _refused_file_error(refused[0])
        raise ConfigError(path, f"no job named {name!r}")
    return load_job(path)
