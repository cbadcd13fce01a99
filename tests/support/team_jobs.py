"""A team's own jobs (`kind: python`, `kind: sql`), with the code in a directory outside the
repository, and the input each is tested on.

`write_team_job` writes a job file naming the team's code into a test platform. Three jobs:

- `fraud_scores` (stateless python): each purchase sized by a pandas UDF of another module of the
  package (so the code must reach Spark's Python workers), partitioned by that size and the event
  time. A code change that tests restate changes `scoring`, never the UDF's module: Spark reuses
  its Python workers across a session's queries, and a worker keeps the module it imported.
- `purchase_windows` (stateful python): purchases per country in 10-minute event-time windows
  behind a 10-minute watermark, appended once a window closes. Its input is a file per hour of
  event time (`write_hourly_events`), so at a file per batch no event is ever behind the
  watermark, and `write_flush_event` closes every window the files opened: the stream then holds
  what a batch run over the files gives.
- `conversions` (SQL): impressions joined to the plays within the hour after them, a
  stream-stream join with a watermark on each side (`write_conversions_input`).
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from ops.driver.checkpoint import log_entries
from ops.scaffold import EVENTS_SOURCE
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from synthetic.generator import DEFAULT_START, GeneratedBatch, write_batch
from synthetic.scenarios import (
    FLUSH_AFTER,
    IMPRESSIONS_PLAYS_START,
    impressions_plays_scenario,
    write_json_lines,
)
from tests.support.drivers import caught_up, files_read
from tests.support.ports import free_test_port

TEAM_JOB = "fraud_scores"
# Events of at least this amount are "large".
LARGE_AMOUNT = 50.0

RULES_MODULE = f"""
import pandas as pd
from pyspark.sql.functions import pandas_udf


@pandas_udf("string")
def size_of(amount: pd.Series) -> pd.Series:
    return amount.fillna(0.0).map(lambda value: "large" if value >= {LARGE_AMOUNT} else "small")
"""

SCORING_MODULE = """
from pyspark.sql import functions as F

from fraud.rules import size_of


def build(inputs, context):
    events = inputs["events"]
    return events.where(F.col("event_type") == context.parameters["event_type"]).select(
        "event_id", "user_id", "amount", size_of("amount").alias("size"), "event_date", "event_hour"
    )
"""

# A deploy with a bug: every event but the purchases.
BUGGY_SCORING_MODULE = SCORING_MODULE.replace('F.col("event_type") ==', 'F.col("event_type") !=')


# A UDF that raises on one row: an amount the team's rules never expected.
STRICT_RULES_MODULE = RULES_MODULE.replace(
    "    return amount.fillna",
    "    if (amount > 10000).any():\n"
    '        raise ValueError(f"amount {amount.max()} is out of range")\n'
    "    return amount.fillna",
)


def write_team_code(directory: Path, scoring: str = SCORING_MODULE, rules: str = RULES_MODULE) -> Path:
    """The team's package `fraud` in `directory` (outside the repository), with `scoring` and
    `rules`."""
    package = directory / "fraud"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text(rules)
    (package / "scoring.py").write_text(scoring)
    return directory


def team_job_spec(code_dir: Path, **pipeline: Any) -> dict[str, Any]:
    """A job file for the team's `fraud.scoring:build` over the landing directory `events`."""
    return {
        "name": TEAM_JOB,
        "description": "A team's own scoring code, supervised by the platform.",
        "pipeline": {
            "kind": "python",
            "code": str(code_dir),
            "entrypoint": "fraud.scoring:build",
            "sources": {"events": EVENTS_SOURCE},
            "sink": {"path": "fraud_scores"},
            "partition_columns": ["size", "event_date", "event_hour"],
            "parameters": {"event_type": "purchase"},
            **pipeline,
        },
        "operations": {
            "stateful": False,
            "metrics_port": free_test_port(),
            "trigger": {"interval_seconds": 1, "max_files_per_trigger": 1},
            "health": {"stuck_grace_seconds": 180, "startup_grace_seconds": 360},
            "compaction": {"closed_after_hours": 2},
        },
    }


def write_team_job(platform: PlatformConfig, spec: dict[str, Any]) -> Path:
    """Write the job file into the platform's conf dir."""
    path = platform.conf_dir / "jobs" / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def install_team_job(platform: PlatformConfig, code_dir: Path) -> Path:
    """The team's code in `code_dir` and its job file in the platform; the job file's path."""
    return write_team_job(platform, team_job_spec(write_team_code(code_dir)))


SQL_JOB = "conversions"
# Impressions joined to the plays of the same profile and title within the hour after them: a
# stream-stream join with a time bound, each side watermarked (`synthetic.scenarios`' impressions
# and plays).
CONVERSIONS_QUERY = """
SELECT i.impression_id, i.profile_id, i.title_id, p.play_id, 'converted' AS outcome,
       i.event_date, i.event_hour
FROM impressions i JOIN plays p
  ON i.profile_id = p.profile_id AND i.title_id = p.title_id
 AND p.event_time BETWEEN i.event_time AND i.event_time + INTERVAL 1 HOUR
"""


def sql_job_spec(query: str = CONVERSIONS_QUERY) -> dict[str, Any]:
    """A SQL job over the impressions and plays landing directories, declared as the platform's
    own `impressions_plays` job declares them."""
    shipped = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "impressions_plays.yaml").read_text())["pipeline"]
    return {
        "name": SQL_JOB,
        "description": "A team's SQL: impressions that converted into a play within the hour.",
        "pipeline": {
            "kind": "sql",
            "sources": {"impressions": shipped["impressions"], "plays": shipped["plays"]},
            "watermarks": {"impressions": 10, "plays": 10},
            "query": query,
            "sink": {"path": SQL_JOB},
            "partition_columns": ["outcome", "event_date", "event_hour"],
        },
        "operations": {
            "stateful": True,
            "checkpoint_format": 2,
            "metrics_port": free_test_port(),
            "trigger": {"interval_seconds": 1, "max_files_per_trigger": 1},
            "health": {"stuck_grace_seconds": 180, "startup_grace_seconds": 360},
        },
    }


def write_conversions_input(landing_root: Path, seed: int) -> int:
    """`synthetic.scenarios`' 300 impressions and plays from 6 hours after the seed before (the
    scenario spans about 5.5 hours), as one file per source arriving after the files before: at a
    file per source per batch, nothing falls behind the join's watermarks, so the stream gives
    what a batch run gives. Returns the files written to the first source, one."""
    with tempfile.TemporaryDirectory() as scratch:
        written = impressions_plays_scenario(
            Path(scratch), 300, seed, IMPRESSIONS_PLAYS_START + timedelta(hours=6 * seed)
        )
        for source in ("impressions", "plays"):
            lines = [
                line
                for path in sorted(written)
                if path.parent.name == source
                for line in path.read_text().splitlines()
            ]
            write_json_lines(landing_root / source, f"{source}-{seed:03d}.json", lines)
    return 1


WINDOWED_JOB = "purchase_windows"
# How long a window is, and how far the watermark trails the newest event time, in minutes.
WINDOW_MINUTES = 10

WINDOWS_MODULE = f"""
from pyspark.sql import functions as F


def build(inputs, context):
    # Watermarked before the filter: every event moves the watermark, a purchase or not.
    events = inputs["events"].withWatermark("event_time", "{WINDOW_MINUTES} minutes")
    counts = (
        events.where(F.col("event_type") == "purchase")
        .groupBy(
            F.window("event_time", "{WINDOW_MINUTES} minutes"),
            F.coalesce("country", F.lit("unknown")).alias("country"),
        )
        .agg(F.count("*").alias("purchases"), F.max("amount").alias("largest"))
    )
    return counts.select(
        "country",
        F.col("window.start").alias("window_start"),
        "purchases",
        "largest",
        F.to_date("window.start").alias("event_date"),
        F.hour("window.start").alias("event_hour"),
    )
"""

# A deploy with a bug: every event counted, not only the purchases (the same state).
BUGGY_WINDOWS_MODULE = WINDOWS_MODULE.replace(
    '        events.where(F.col("event_type") == "purchase")\n', "        events\n"
)


def write_windowed_code(directory: Path, windows: str = WINDOWS_MODULE) -> Path:
    """The team's package `velocity` in `directory` (outside the repository), its module `windows`."""
    package = directory / "velocity"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "windows.py").write_text(windows)
    return directory


def windowed_job_spec(code_dir: Path) -> dict[str, Any]:
    """A job file for the team's `velocity.windows:build`: a stateful job, a file per batch."""
    spec = team_job_spec(code_dir)
    spec["name"] = WINDOWED_JOB
    spec["description"] = "A team's windowed purchase counts: its own stateful code."
    spec["pipeline"].update(
        entrypoint="velocity.windows:build",
        sink={"path": WINDOWED_JOB},
        partition_columns=["event_date", "event_hour"],
        parameters={},
    )
    spec["operations"]["stateful"] = True
    return spec


def install_windowed_job(platform: PlatformConfig, code_dir: Path) -> Path:
    """The stateful team job's code in `code_dir` and its job file in the platform."""
    return write_team_job(platform, windowed_job_spec(write_windowed_code(code_dir)))


def write_hourly_events(landing_root: Path, seed: int) -> GeneratedBatch:
    """300 product events (2 % malformed) over the hour `seed` hours after the generator's start,
    in `events/events-<seed>.json`: each file's events after the ones of the files before."""
    return write_batch(
        landing_root / "events",
        300,
        0.02,
        seed,
        start=DEFAULT_START + timedelta(hours=seed),
        file_name=f"events-{seed:03d}.json",
    )


def write_flush_event(landing_root: Path) -> GeneratedBatch:
    """One event `synthetic.scenarios.FLUSH_AFTER` after the generator's start: the watermark
    passes every window the hourly files opened (its own window stays open)."""
    return write_batch(
        landing_root / "events", 1, 0.0, 0, start=DEFAULT_START + FLUSH_AFTER, file_name="events-flush.json"
    )


def windows_closed(platform: PlatformConfig, job: str, files: int) -> bool:
    """Whether a running job has read `files` files, the last one the flush, and committed a batch
    after the one that read it: that batch moved the watermark, the next one appends the windows
    it closed."""
    if not caught_up(platform, job, files):
        return False
    newest = max(log_entries(platform.checkpoint_root / job / "commits"))
    return files_read(platform, job, batch=newest - 1) == files
