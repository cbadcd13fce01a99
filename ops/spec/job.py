"""Typed, frozen models of a job file (`conf/jobs/<name>.yaml`: `pipeline` + `operations`) and its loader.

Every model forbids unknown keys. Loading validates the whole file and raises one `ConfigError`
naming the file and the dotted path of the first bad field, so nothing is launched from a file
that does not validate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from croniter import croniter
from pydantic import Field, ValidationError, field_validator

from ops.exceptions import ConfigError
from ops.spec.model import Model, describe_error, read_yaml
from ops.spec.pipelines import Pipeline
from ops.spec.platform import conf_dir

JOB_NAME_PATTERN = r"^[a-z][a-z0-9_]{1,62}$"


# --- job specs -----------------------------------------------------------------------------------


class Resources(Model):
    master: str | None = None
    driver_memory: str = "1g"
    shuffle_partitions: int = Field(4, ge=1)


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


class RestatementSchedule(Model):
    """A scheduled restatement: rewind to the newest savepoint taken `lookback_hours` before the
    run and recompute everything after it with the current code (late fixes, reference data)."""

    cron: str = Field(description="When, as a cron expression in UTC, e.g. '0 3 * * *'.")
    lookback_hours: float = Field(24.0, gt=0)

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if not croniter.is_valid(value):
            raise ValueError(f"not a valid cron expression: {value!r}")
        return value


class PreviewTaps(Model):
    """Preview taps (`warden preview`): the newest records at named stages of the job's transform.

    Each tapped stage costs one extra small query (see `jobs/preview.py`); no stages, no cost.
    """

    stages: tuple[str, ...] = Field((), description="Stages to tap, e.g. [parsed, output].")
    records: int = Field(100, ge=1, le=10_000, description="Records kept per stage, the newest.")


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


# --- loading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobLoadResult:
    """What loading `conf/jobs/` found: the valid specs and one error per invalid file."""

    specs: dict[str, JobSpec]
    errors: dict[Path, ConfigError]


def load_job(path: Path) -> JobSpec:
    """Load and validate one job file; its `name` must match the file name."""
    document, raw = read_yaml(path)
    version = hashlib.sha256(raw).hexdigest()[:12]
    try:
        spec = JobSpec.model_validate({**document, "config_version": version})
    except ValidationError as exc:
        raise ConfigError(path, describe_error(exc)) from exc
    if spec.name != path.stem:
        raise ConfigError(path, f"field 'name': {spec.name!r} must match the file name {path.stem!r}")
    return spec


def job_files(directory: Path | None = None) -> Iterator[Path]:
    """The job files in `conf/jobs/`, sorted by name."""
    jobs_dir = (directory or conf_dir()) / "jobs"
    return iter(sorted(jobs_dir.glob("*.yaml")))


def load_jobs(directory: Path | None = None) -> JobLoadResult:
    """Load every job file; an invalid file is reported, the others still load."""
    specs: dict[str, JobSpec] = {}
    errors: dict[Path, ConfigError] = {}
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
    path = (directory or conf_dir()) / "jobs" / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(path, f"no job named {name!r}")
    return load_job(path)
