"""`warden new-job NAME --kind python|sql --code DIR`: a team's job to start from.

It writes the job file (`conf/jobs/NAME.yaml`) and, under the code directory (outside this
repository, the team's own), a test that runs the job over a few lines as a stream and as a batch
with `jobs.harness` and compares them; a python job also gets its package, `NAME/logic.py`,
whose `build` the job file names. The job reads `events` (the generator's product events), keeps
the purchases and sinks them by country and event hour: each piece is there to be replaced.
Nothing is overwritten: a file that exists already stops it before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml

from ops.exceptions import ConfigError
from ops.ports import port_is_free
from ops.spec.job import JOB_NAME_PATTERN, job_file, load_jobs

Kind = Literal["python", "sql"]
# Where new jobs' metrics ports are taken from (the shipped jobs use 9401-9408).
METRICS_PORTS = range(9410, 9500)
# A new job's trigger (the board's New job form gives its jobs the same): a first batch after a
# backlog reads 50 files, not every file the landing directory has gathered.
NEW_JOB_TRIGGER = {"interval_seconds": 5, "max_files_per_trigger": 50}

# The generator's product events (`synthetic.generator`), as a job file declares them.
EVENTS_SOURCE = {
    "path": "events",
    "event_time_field": "event_time",
    "fields": [
        {"name": "event_id", "type": "string", "required": True},
        {"name": "event_time", "type": "timestamp", "required": True},
        {"name": "user_id", "type": "string", "required": True},
        {"name": "event_type", "type": "string", "required": True},
        {"name": "country", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}

QUERY = """SELECT event_id, user_id, amount, coalesce(country, 'unknown') AS country, event_date, event_hour
FROM events
WHERE event_type = 'purchase'
"""

LOGIC = '''"""The logic of the {name} job: its sources' valid events in, the rows to sink out.

`inputs` holds each source by name (typed fields, event_date, event_hour); `context` the job's
name, its `parameters` and the SparkSession. Only build the query here: the platform calls this
function to check the job too.
"""

from pyspark.sql import functions as F


def build(inputs, context):
    events = inputs["events"]
    return events.where(F.col("event_type") == context.parameters["event_type"]).select(
        "event_id",
        "user_id",
        "amount",
        F.coalesce("country", F.lit("unknown")).alias("country"),
        "event_date",
        "event_hour",
    )
'''

TEST = '''"""The {name} job over a few lines, as a stream and as a batch (`jobs.harness`).

Run from the Streamwarden checkout: `.venv/bin/pytest {tests_dir}`.
"""

import json
from pathlib import Path

from jobs.harness import local_session, run_lines

JOB_FILE = Path({job_file!r})
LINES = [
    json.dumps(event)
    for event in [
        {events}
    ]
] + ["not json"]


def test_the_stream_and_a_batch_run_give_the_same_rows(tmp_path):
    result = run_lines(local_session(), JOB_FILE, {{"events": LINES}}, tmp_path)

    rows = sorted(result.streamed.collect(), key=str)
    assert rows == sorted(result.batch.collect(), key=str)
    assert [row["event_id"] for row in rows if row["dead_letter_reason"] is None] == ["e1", "e3"]
    assert [row["raw"] for row in rows if row["dead_letter_reason"] is not None] == ["not json"]
'''

EVENTS = [
    {"event_id": "e1", "event_time": "2026-01-01T10:00:00Z", "user_id": "u1", "event_type": "purchase",
     "country": "DE", "amount": 12.5},
    {"event_id": "e2", "event_time": "2026-01-01T10:05:00Z", "user_id": "u2", "event_type": "view",
     "country": "FR"},
    {"event_id": "e3", "event_time": "2026-01-01T11:00:00Z", "user_id": "u1", "event_type": "purchase",
     "amount": 40.0},
]  # fmt: skip


def new_job(conf_dir: Path, name: str, kind: Kind, code_dir: Path) -> list[Path]:
    """Write the job's files; the paths written, the job file first."""
    if not re.match(JOB_NAME_PATTERN, name):
        raise ConfigError(Path(name), f"{name!r} is not a valid job name ({JOB_NAME_PATTERN})")
    code_dir = code_dir.resolve()
    path = job_file(name, conf_dir)
    tests_dir = code_dir / "tests"
    files = {path: yaml.safe_dump(_job_document(conf_dir, name, kind, code_dir), sort_keys=False)}
    if kind == "python":
        files[code_dir / name / "__init__.py"] = ""
        files[code_dir / name / "logic.py"] = LOGIC.format(name=name)
    events = ",\n        ".join(repr(event) for event in EVENTS)
    files[tests_dir / f"test_{name}.py"] = TEST.format(
        name=name, tests_dir=tests_dir, job_file=str(path), events=events
    )
    existing = [str(target) for target in files if target.exists()]
    if existing:
        raise ConfigError(path, f"not written: {', '.join(existing)} exist already")
    for target, text in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return list(files)


def _job_document(conf_dir: Path, name: str, kind: Kind, code_dir: Path) -> dict[str, object]:
    logic: dict[str, object]
    if kind == "python":
        logic = {
            "code": str(code_dir),
            "entrypoint": f"{name}.logic:build",
            "parameters": {"event_type": "purchase"},
        }
    else:
        logic = {"query": QUERY}
    return {
        "name": name,
        "description": f"The {name} job ({kind}): purchases by country and event hour.",
        "pipeline": {
            "kind": kind,
            **logic,
            "sources": {"events": EVENTS_SOURCE},
            "sink": {"path": name},
            "partition_columns": ["country", "event_date", "event_hour"],
        },
        "operations": {
            "stateful": False,
            "metrics_port": free_metrics_port(conf_dir),
            "trigger": NEW_JOB_TRIGGER,
            "compaction": {"closed_after_hours": 2},
        },
    }


def free_metrics_port(conf_dir: Path) -> int:
    """The first port of `METRICS_PORTS` no job file names and nothing listens on."""
    loaded = load_jobs(conf_dir)
    taken = {spec.operations.metrics_port for spec in loaded.specs.values()}
    port = next((p for p in METRICS_PORTS if p not in taken and port_is_free(p)), None)
    if port is None:
        raise ConfigError(
            conf_dir / "jobs", f"no free metrics port in {METRICS_PORTS.start}-{METRICS_PORTS.stop - 1}"
        )
    return port
