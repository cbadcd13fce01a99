"""The job board's New job and Edit form: the values it starts from and the job file it makes.

The form edits a router or SQL job: its name and description and its `pipeline` section (the
sources with their fields, the route filters and columns or the query, the sink), which the page
sends as the job file writes it (`DraftRequest.pipeline`). So every problem found later is named
by the same dotted field as the input it belongs to (`pipeline.routes.0.filter`).

A new job gets the operations `warden new-job` gives its jobs: a metrics port no job file names
and nothing listens on, and a trigger that reads at most 50 files a batch. An edit keeps the file's
`operations` and every key of its `pipeline` the form does not show (so what the form does not
show, it does not change); the file is written again from its values, without its comments.
"""

from __future__ import annotations

from typing import Any, Literal, cast, get_args

import yaml
from pydantic import JsonValue

from ops.exceptions import ConfigError
from ops.scaffold import EVENTS_SOURCE, NEW_JOB_TRIGGER, QUERY, free_metrics_port
from ops.spec.job import JobSpec, job_file
from ops.spec.model import Model, read_yaml
from ops.spec.platform import PlatformConfig

# The kinds the form writes: their whole pipeline is plain fields and Spark SQL. A python job's
# logic is a code directory of the team's (`warden new-job`); the built-in kinds are edited by hand.
FormKind = Literal["router", "sql"]
FORM_KINDS: tuple[str, ...] = get_args(FormKind)


class DraftRequest(Model):
    """What the form sends: the job's name, description, whether it keeps state (a SQL job's
    windows, joins and aggregations do) and its `pipeline` section."""

    name: str
    description: str = ""
    stateful: bool = False
    pipeline: dict[str, JsonValue]


def new_job_values(kind: FormKind) -> DraftRequest:
    """The values a New job form starts from: the generator's product events as the source, and
    one route (or the query `warden new-job` writes) to replace; name and sink still to fill in."""
    source = cast("dict[str, JsonValue]", EVENTS_SOURCE)
    pipeline: dict[str, JsonValue]
    if kind == "router":
        route: dict[str, JsonValue] = {
            "name": "purchases",
            "filter": "event_type = 'purchase'",
            "columns": ["event_id", "event_time", "user_id", "amount"],
        }
        pipeline = {"kind": kind, "source": source, "routes": [route], "sink": {"path": ""}}
    else:
        pipeline = {
            "kind": kind,
            "sources": {"events": source},
            "watermarks": {},
            "query": QUERY,
            "sink": {"path": ""},
            "partition_columns": ["country", "event_date", "event_hour"],
        }
    return DraftRequest(name="", pipeline=pipeline)


def edit_refusal(spec: JobSpec | ConfigError) -> str | None:
    """Why the form cannot edit this job, or None when it can."""
    if isinstance(spec, ConfigError):
        return f"the job file does not validate ({spec.problem}): fix it by hand"
    if spec.pipeline.kind not in FORM_KINDS:
        return (
            f"the form edits {' and '.join(FORM_KINDS)} jobs; this is a {spec.pipeline.kind} job: edit its "
            f"file and deploy it with `warden upgrade {spec.name} --spec FILE`"
        )
    return None


def current_values(platform: PlatformConfig, spec: JobSpec) -> DraftRequest:
    """The Edit form's values: the job file as it is written (not as loaded: no defaults filled in)."""
    document = _current_document(platform, spec.name)
    return DraftRequest(
        name=spec.name,
        description=spec.description,
        stateful=spec.operations.stateful,
        pipeline=document["pipeline"],
    )


def draft_text(platform: PlatformConfig, request: DraftRequest, job: str | None = None) -> str:
    """The job file the form's values make: a new job's, or with `job` that job's file with the
    form's values in place of its own."""
    if job is None:
        operations: dict[str, Any] = {
            "stateful": request.stateful,
            "metrics_port": free_metrics_port(platform.conf_dir),
            "trigger": dict(NEW_JOB_TRIGGER),
        }
        document: dict[str, Any] = {
            "name": request.name,
            "description": request.description,
            "pipeline": request.pipeline,
            "operations": operations,
        }
    else:
        current = _current_document(platform, job)
        document = {
            **current,
            "name": request.name,
            "description": request.description,
            "pipeline": {**current["pipeline"], **request.pipeline},
            "operations": {**current["operations"], "stateful": request.stateful},
        }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def _current_document(platform: PlatformConfig, job: str) -> dict[str, Any]:
    path = job_file(job, platform.conf_dir)
    document, _ = read_yaml(path)
    return document
