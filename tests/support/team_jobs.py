"""Jobs of a team's own code (`kind: python`), with the code in a directory outside the repository.

`write_team_job` writes the team's package and a job file naming it into a test platform; the
package here is a small fraud-scoring job: each event sized by a pandas UDF of another module of
the package (so the code must reach Spark's Python workers), partitioned by that size and the
event time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ops.spec.platform import PlatformConfig
from tests.support.ports import free_test_port

# The router's events: the synthetic generator writes them (`synthetic.generator.write_batch`).
EVENT_FIELDS = [
    {"name": "event_id", "type": "string", "required": True},
    {"name": "event_time", "type": "timestamp", "required": True},
    {"name": "user_id", "type": "string", "required": True},
    {"name": "event_type", "type": "string", "required": True},
    {"name": "country", "type": "string"},
    {"name": "amount", "type": "double"},
]

RULES_MODULE = """
import pandas as pd
from pyspark.sql.functions import pandas_udf


@pandas_udf("string")
def size_of(amount: pd.Series) -> pd.Series:
    return amount.fillna(0.0).map(lambda value: "{large}" if value >= {threshold} else "small")
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


def write_team_code(directory: Path, *, large: str = "large", threshold: float = 50.0) -> Path:
    """The team's package `fraud` in `directory` (outside the repository); the label and the
    amount a large event gets are what a code change changes."""
    package = directory / "fraud"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text(RULES_MODULE.format(large=large, threshold=threshold))
    (package / "scoring.py").write_text(SCORING_MODULE)
    return directory


def team_job_spec(code_dir: Path, **pipeline: Any) -> dict[str, Any]:
    """A job file for the team's `fraud.scoring:build` over the landing directory `events`."""
    return {
        "name": "fraud_scores",
        "description": "A team's own scoring code, supervised by the platform.",
        "pipeline": {
            "kind": "python",
            "code": str(code_dir),
            "entrypoint": "fraud.scoring:build",
            "sources": {
                "events": {"path": "events", "event_time_field": "event_time", "fields": EVENT_FIELDS}
            },
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
        },
    }


def write_team_job(platform: PlatformConfig, spec: dict[str, Any]) -> Path:
    """Write the job file into the platform's conf dir."""
    path = platform.conf_dir / "jobs" / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
