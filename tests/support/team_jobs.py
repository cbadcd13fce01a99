"""Jobs of a team's own code (`kind: python`), with the code in a directory outside the repository.

`write_team_job` writes the team's package and a job file naming it into a test platform; the
package here is a small fraud-scoring job: each purchase sized by a pandas UDF of another module
of the package (so the code must reach Spark's Python workers), partitioned by that size and the
event time. A code change that tests restate changes `scoring`, never the UDF's module: Spark
reuses its Python workers across a session's queries, and a worker keeps the module it imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ops.scaffold import EVENTS_SOURCE
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
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
