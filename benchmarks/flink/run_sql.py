"""Run Flink SQL statements in a local PyFlink mini-cluster and time them (the Flink side).

Runs under the benchmark's own PyFlink virtualenv, never the project's, so it imports nothing from
the project. Its one argument is a JSON file written by `benchmarks.flink_compare`:

    {"mode": "batch" | "streaming", "parallelism": 2,
     "runs": [{"name": "warm-up", "statements": [...]}, {"name": "round 1", "statements": [...]}]}

Each run gets a fresh TableEnvironment in the same JVM (so a warm-up run warms the JIT for the
next), executes its statements in order and waits for the last one, an INSERT. It prints one
progress line per run and, last, one line `RESULT <json>` with each run's wall seconds (from
submitting the INSERT to the job's end: planning, job start-up and the run) and the job's own net
runtime as Flink measured it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment


def run(mode: str, parallelism: int, statements: list[str]) -> dict[str, float]:
    if mode == "batch":
        settings = EnvironmentSettings.in_batch_mode()
    else:
        settings = EnvironmentSettings.in_streaming_mode()
    table_env = TableEnvironment.create(settings)
    config = table_env.get_config()
    config.set("parallelism.default", str(parallelism))
    config.set("table.local-time-zone", "UTC")
    for statement in statements[:-1]:
        table_env.execute_sql(statement)
    started = time.monotonic()
    result = table_env.execute_sql(statements[-1])
    job_result = result.get_job_client().get_job_execution_result().result()
    wall = time.monotonic() - started
    return {"wall_seconds": wall, "engine_seconds": job_result.get_net_runtime() / 1000}


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    timings = []
    for spec in plan["runs"]:
        timing = run(plan["mode"], plan["parallelism"], spec["statements"])
        wall, net = timing["wall_seconds"], timing["engine_seconds"]
        print(f"  flink {spec['name']}: {wall:.1f}s wall, net runtime {net:.1f}s", flush=True)
        timings.append(timing)
    print("RESULT " + json.dumps({"runs": timings}), flush=True)


if __name__ == "__main__":
    main()
