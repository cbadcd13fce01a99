"""A job file drafted on the board, checked before anything is written, the way `warden
validate` checks a job file: every problem is named by its dotted field (`pipeline.routes.0.filter`,
or `draft` for the file as a whole) so the form shows it beside its input.

In order, each step only when the ones before found nothing: the YAML; the name (a new job's must
be free, an edit keeps its job's) with the kind (router or sql, `ops.console.job_form`) and the
model, every problem pydantic finds rather than only the first; for an edit, what a running job cannot
change (its sink, whether it keeps state) and whether anything changed at all; the metrics port
(a port another job file names would make one of the two files invalid); and Spark's analyzer.

The analyzer is `python -m jobs.analysis` (`ops.spec.analysis.run_analysis`), the check a driver
runs before its query starts, in a process of its own: the board is served by Airflow's api-server,
which must not host a JVM. It runs over a scratch conf dir holding only the draft, kept per draft
under `<runtime_root>/drafts/<digest>/` with the verdict the analysis stored there. That verdict
counts for that exact text and Spark version only (`read_verdict`, as for any job file), so the
DAG task that writes the file after the board checked it finds the verdict instead of starting
Spark again, and the written file's own verdict is a copy of it. Drafts older than a day are
removed by the next check.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ops.atomic import write_atomically
from ops.console.job_form import FORM_KINDS
from ops.exceptions import ConfigError, DraftCheckBusyError, DraftRejectedError
from ops.spec.analysis import AnalysisVerdict, read_verdict, run_analysis
from ops.spec.job import JOB_NAME_PATTERN, REFUSED_JOB_FILE_SUFFIXES, JobSpec, job_file, load_job, load_jobs
from ops.spec.platform import PlatformConfig, load_platform

# The field a problem of the draft as a whole is named by.
DRAFT_FIELD = "draft"
DRAFTS_DIR = "drafts"
KEEP_DRAFTS = timedelta(days=1)
# How a ConfigError's problem names its field (`ops.spec.model.describe_error`).
FIELD_PROBLEM = re.compile(r"^field '(?P<field>[^']+)': (?P<why>.*)$", re.DOTALL)


@dataclass(frozen=True)
class CheckedDraft:
    """A draft nothing was found wrong with: its spec (as loaded from the draft's text), the text
    and Spark's verdict on it."""

    spec: JobSpec
    text: str
    verdict: AnalysisVerdict


def check_draft(platform: PlatformConfig, text: str, job: str | None = None) -> CheckedDraft:
    """Check `text` as a new job's file, or with `job` as that job's new version; nothing outside
    the draft's scratch directory is written. Raises `DraftRejectedError` with the problems."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise DraftRejectedError(job or "?", {DRAFT_FIELD: f"not valid YAML: {error}"}) from error
    if not isinstance(document, dict):
        raise DraftRejectedError(job or "?", {DRAFT_FIELD: "a job file is a YAML mapping"})
    name = str(document.get("name", ""))
    # The name's own words replace the model's pattern for it.
    problems = (_kind_problems(document) or _model_problems(document)) | _name_problems(platform, name, job)
    if problems:
        raise DraftRejectedError(name, problems)
    scratch = _scratch_platform(platform, name, text)
    try:
        spec = load_job(job_file(name, scratch.conf_dir))
    except ConfigError as error:
        raise DraftRejectedError(name, _named(error.problem)) from error
    problems = (_edit_problems(platform, spec) if job is not None else {}) or _port_problems(platform, spec)
    if problems:
        raise DraftRejectedError(name, problems)
    verdict = read_verdict(scratch, spec) or run_analysis(scratch, [name])[name]
    if verdict.rejected:
        raise DraftRejectedError(name, verdict.problems)
    return CheckedDraft(spec=spec, text=text, verdict=verdict)


class DraftChecks:
    """The board's draft checks, one at a time: each may start a Spark JVM on the api-server's host."""

    def __init__(self, platform: PlatformConfig) -> None:
        self.platform = platform
        self._running = threading.Lock()

    def check(self, text: str, job: str | None = None) -> CheckedDraft:
        """`check_draft`, or `DraftCheckBusyError` while another check runs."""
        if not self._running.acquire(blocking=False):
            raise DraftCheckBusyError("another draft is being checked; try again when it has finished")
        try:
            return check_draft(self.platform, text, job)
        finally:
            self._running.release()


def _name_problems(platform: PlatformConfig, name: str, job: str | None) -> dict[str, str]:
    if job is not None:
        if name != job:
            return {"name": f"an edit keeps the job's name {job!r}, not {name!r}"}
        return {} if job_file(job, platform.conf_dir).exists() else {"name": f"no job named {job!r}"}
    if not re.match(JOB_NAME_PATTERN, name):
        return {"name": f"{name!r} is not a job name: lower case letters, digits and _, a letter first"}
    path = job_file(name, platform.conf_dir)
    taken = [p for p in (path, *map(path.with_suffix, REFUSED_JOB_FILE_SUFFIXES)) if p.exists()]
    return {"name": f"a job named {name!r} exists already ({taken[0]})"} if taken else {}


def _kind_problems(document: dict[str, Any]) -> dict[str, str]:
    pipeline = document.get("pipeline")
    kind = pipeline.get("kind") if isinstance(pipeline, dict) else None
    if kind in FORM_KINDS:
        return {}
    return {"pipeline.kind": f"the form writes {' or '.join(FORM_KINDS)} jobs, not {kind!r}"}


def _model_problems(document: dict[str, Any]) -> dict[str, str]:
    """Every problem the job file's model finds, by dotted field of the file."""
    try:
        JobSpec.model_validate(document)
    except ValidationError as error:
        problems: dict[str, str] = {}
        for detail in error.errors():
            field = _field(detail, document["pipeline"]["kind"])
            problems[field] = "; ".join(filter(None, (problems.get(field), _message(detail))))
        return problems
    return {}


def _field(detail: ErrorDetails, kind: str) -> str:
    location = [str(part) for part in detail["loc"]]
    # A union's tag is part of pydantic's location (`pipeline.router.routes`), not of the file.
    if location[:2] == ["pipeline", kind]:
        del location[1]
    return ".".join(location) or DRAFT_FIELD


def _message(detail: ErrorDetails) -> str:
    if detail["type"] == "extra_forbidden":
        return "unknown key"
    if detail["type"] == "missing":
        return "required"
    return str(detail["msg"]).removeprefix("Value error, ")


def _named(problem: str) -> dict[str, str]:
    """A ConfigError's problem as {field: why}."""
    named = FIELD_PROBLEM.match(problem)
    return {named["field"]: named["why"]} if named else {DRAFT_FIELD: problem}


def _edit_problems(platform: PlatformConfig, spec: JobSpec) -> dict[str, str]:
    """What a new version of a running job may not change, and a version that changes nothing."""
    current = load_job(job_file(spec.name, platform.conf_dir))
    problems = {}
    if spec.pipeline.sink != current.pipeline.sink:
        problems["pipeline.sink.path"] = (
            f"the sink stays {current.pipeline.sink.path!r}: a new sink is a new job (its checkpoint "
            "and output start empty)"
        )
    if spec.operations.stateful != current.operations.stateful:
        problems["operations.stateful"] = (
            "whether the job keeps state is fixed by its checkpoint: that is a new job"
        )
    if not problems and spec == current.model_copy(update={"config_version": spec.config_version}):
        problems[DRAFT_FIELD] = "nothing changed: this is the job's installed version"
    return problems


def _port_problems(platform: PlatformConfig, spec: JobSpec) -> dict[str, str]:
    port = spec.operations.metrics_port
    others = [
        other.name
        for other in load_jobs(platform.conf_dir).specs.values()
        if other.name != spec.name and other.operations.metrics_port == port
    ]
    if not others:
        return {}
    return {"operations.metrics_port": f"port {port} is the metrics port of job {others[0]!r}"}


def _scratch_platform(platform: PlatformConfig, name: str, text: str) -> PlatformConfig:
    """The draft's scratch platform: the platform's settings with a runtime root of its own (where
    the analysis stores its verdict) and the draft as its one job file."""
    root = platform.runtime_root / DRAFTS_DIR
    _remove_old_drafts(root)
    scratch = root / hashlib.sha256(text.encode()).hexdigest()[:16]
    conf_dir = scratch / "conf"
    settings = platform.model_dump(mode="json")
    settings["storage"] = {
        "runtime_root": str(scratch / "runtime"),
        "landing_root": str(platform.landing_root),
        "lake_root": str(platform.lake_root),
        "checkpoint_root": str(scratch / "checkpoints"),
    }
    write_atomically(conf_dir / "platform.yaml", yaml.safe_dump(settings))
    write_atomically(job_file(name, conf_dir), text)
    return load_platform(conf_dir)


def _remove_old_drafts(root: Path) -> None:
    if not root.is_dir():
        return
    oldest = time.time() - KEEP_DRAFTS.total_seconds()
    for draft in root.iterdir():
        if draft.stat().st_mtime < oldest:
            shutil.rmtree(draft, ignore_errors=True)
