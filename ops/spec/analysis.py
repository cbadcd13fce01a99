"""Verdicts of Spark's analyzer on job files, stored per config version, read without Spark.

A job file can validate as YAML and still hold Spark SQL that Spark rejects: a route filter
`amount >>> 1`, an unknown column, a non-boolean `red_when`, an attack_chains rule filter, a
preview tap on a stage the kind lacks. Only Spark's analyzer (a JVM) can tell, and a driver asks
it before its query starts (`jobs.catalog.expression_problems`). Parsing DAG files and `warden
status` must stay fast and free of pyspark, so they cannot ask it themselves. Instead:

* `python -m jobs.analysis` runs exactly the driver's check over empty frames of each job's
  declared schema (nothing is read, no stream starts) and writes one verdict per job to
  `<runtime_root>/jobs/<job>/analysis.json`: the file's config version (a digest of its bytes),
  the pyspark version, and the problems by dotted field, each quoting the route or rule, the
  expression and Spark's message. `run_analysis` starts that process; `warden validate` runs it
  for every valid job file, the `warden_platform` DAG every minute for the versions without a
  verdict.
* Everything that decides whether a job file is valid consults the verdict (`with_verdicts`,
  `analysis_error`): the DAG factory (a rejected version gets no supervision DAG), `warden
  validate` and `status`, the supervisor's pass (it launches nothing from a rejected version)
  and the platform DAG (it pages `config_invalid` once, like for any invalid file).

A verdict applies only to the exact file content and Spark version it was computed for, so a
changed file (or a Spark upgrade) is analysed again before it can be rejected. A version with no
verdict yet is treated as valid, provisionally: it keeps (or gets) its DAG. Refusing it instead
would take every edited job off supervision until someone analysed it, even for a harmless
threshold change, and nothing wrong can run in the meantime: the driver runs the same check before
its query starts and refuses the version (the supervisor then holds the job `FAILED` with one
`spec_rejected` page instead of restarting it), and the platform DAG records a verdict within a
minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from ops.exceptions import ConfigError, WardenError
from ops.spec.job import JobLoadResult, JobSpec, find_job, job_file
from ops.spec.model import Model
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig

ANALYSIS_FILE = "analysis.json"
# Spark's start-up dominates (seconds); a generous bound only stops a hung JVM.
ANALYSIS_TIMEOUT_SECONDS = 600.0


class AnalysisVerdict(Model):
    """What Spark's analyzer said about one version of one job file; no problems means accepted."""

    job: str
    config_version: str
    spark_version: str
    analysed_at: datetime
    problems: dict[str, str]

    @property
    def rejected(self) -> bool:
        return bool(self.problems)

    def errors(self, path: Path) -> list[ConfigError]:
        """One `ConfigError` per problem, each naming the file and the field."""
        return [ConfigError(path, f"field '{field}': {why}") for field, why in self.problems.items()]

    def error(self, path: Path) -> ConfigError:
        """The first problem as a `ConfigError`, with a count of the others."""
        (field, why), more = next(iter(self.problems.items())), len(self.problems) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        return ConfigError(path, f"field '{field}': {why}{suffix}")


def verdict_path(platform: PlatformConfig, job: str) -> Path:
    """Where the newest verdict of `job`'s file is kept."""
    return platform.job_runtime_dir(job) / ANALYSIS_FILE


def installed_spark_version() -> str | None:
    """The installed pyspark's version, read from its package metadata (pyspark is not imported)."""
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return None


def read_verdict(platform: PlatformConfig, spec: JobSpec) -> AnalysisVerdict | None:
    """The verdict on exactly this version of the job file under the installed Spark, or None.

    A verdict on another version of the file, by another Spark, or unreadable is no verdict.
    """
    try:
        verdict = AnalysisVerdict.model_validate_json(verdict_path(platform, spec.name).read_bytes())
    except (OSError, ValidationError):
        return None
    if verdict.config_version != spec.config_version or verdict.job != spec.name:
        return None
    spark_version = installed_spark_version()
    if spark_version is not None and verdict.spark_version != spark_version:
        return None
    return verdict


def analysis_error(platform: PlatformConfig, spec: JobSpec) -> ConfigError | None:
    """The error that makes this version of the job file invalid, if Spark's analyzer rejected it."""
    verdict = read_verdict(platform, spec)
    if verdict is None or not verdict.rejected:
        return None
    return verdict.error(job_file(spec.name, platform.conf_dir))


def find_valid_job(name: str, platform: PlatformConfig) -> JobSpec:
    """`find_job`, and a `ConfigError` too when the analyzer rejected this version of the file."""
    spec = find_job(name, platform.conf_dir)
    error = analysis_error(platform, spec)
    if error is not None:
        raise error
    return spec


def with_verdicts(platform: PlatformConfig, loaded: JobLoadResult) -> JobLoadResult:
    """`loaded` with every spec the analyzer rejected moved to the errors (its file named)."""
    specs = dict(loaded.specs)
    errors = dict(loaded.errors)
    for name, spec in loaded.specs.items():
        error = analysis_error(platform, spec)
        if error is not None:
            del specs[name]
            errors[error.path] = error
    return replace(loaded, specs=specs, errors=errors)


def unanalysed(platform: PlatformConfig, loaded: JobLoadResult) -> list[str]:
    """The valid jobs whose current file version has no verdict yet, by name."""
    return sorted(name for name, spec in loaded.specs.items() if read_verdict(platform, spec) is None)


def run_analysis(platform: PlatformConfig, jobs: list[str]) -> dict[str, AnalysisVerdict]:
    """Analyse the named jobs' files with Spark (`python -m jobs.analysis`, one local session for
    all of them), record their verdicts and return them by job.

    Starts a JVM: seconds, not milliseconds. Raises `WardenError` when the analysis itself could
    not run (no Java, a crash), naming what the process said.
    """
    if not jobs:
        return {}
    env = {
        **os.environ,
        CONF_DIR_ENV: str(platform.conf_dir),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "jobs.analysis", *jobs]
    try:
        finished = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=ANALYSIS_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise WardenError(f"Spark analysis of {', '.join(jobs)} did not finish in {exc.timeout:g}s") from exc
    if finished.returncode != 0:
        said = (finished.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise WardenError(f"Spark analysis of {', '.join(jobs)} failed (exit {finished.returncode}): {said}")
    verdicts = {}
    for line in finished.stdout.splitlines():
        verdict = AnalysisVerdict.model_validate(json.loads(line))
        verdicts[verdict.job] = verdict
    return verdicts
