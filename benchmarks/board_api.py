"""The job board API's latency with 50 jobs, through Airflow's real api-server app.

python -m benchmarks.board_api [--jobs 50] [--requests 40]

It builds a throwaway platform (conf dir, runtime and SQLite ledger under a temp dir) with `--jobs`
job files (copies of conf/jobs/router.yaml) that look like jobs that have run for a while: each
with 200 runs (a few failed in the last day), 500 decisions, 50 alerts (one incident open),
10 savepoints, a heartbeat and a full progress history (an hour of minutes, 30 batches of real
progress from tests/ops/fixtures/progress). Then it builds Airflow's api-server app in process
(`airflow.api_fastapi.app.create_app`, the simple auth manager with all admins, as the embedded
platform runs it: every request passes the auth check) and times, alternating, in the same run:

* `GET /api/v2/version`, Airflow's cheapest authenticated endpoint: the floor of any request;
* `GET /streamwarden/api/board`, the whole board;
* `GET /streamwarden/api/jobs/<job>`, one job's page (decisions, savepoints, diagnosis).

The first board request (job files not yet validated) is reported apart. Target: board <= 200 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import yaml

from ops.clock import utcnow
from ops.driver.history import ProgressHistory, write_history
from ops.driver.telemetry import BatchSample, Heartbeat, write_heartbeat
from ops.ledger.schema import alerts_table, decisions_table, runs_table, savepoints_table
from ops.ledger.store import Ledger
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, load_platform

REPO = Path(__file__).resolve().parents[1]
PROGRESS = REPO / "tests" / "ops" / "fixtures" / "progress" / "tiny_batches.json"
RUNS_PER_JOB, DECISIONS_PER_JOB, ALERTS_PER_JOB, SAVEPOINTS_PER_JOB = 200, 500, 50, 10


def build_platform(root: Path, jobs: int) -> list[str]:
    """A platform under `root` with `jobs` jobs and their history; their names."""
    conf = root / "conf"
    (conf / "jobs").mkdir(parents=True)
    runtime = root / "runtime"
    platform_settings = {
        "storage": {
            "runtime_root": str(runtime),
            "landing_root": str(runtime / "landing"),
            "lake_root": str(runtime / "lake"),
            "checkpoint_root": str(runtime / "checkpoints"),
        },
        "ledger_url": f"sqlite:///{runtime / 'ledger.db'}",
    }
    (conf / "platform.yaml").write_text(yaml.safe_dump(platform_settings))
    template = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    names = [f"job_{index:02d}" for index in range(jobs)]
    for index, name in enumerate(names):
        spec = {**template, "name": name}
        spec["operations"] = {**template["operations"], "metrics_port": 20000 + index}
        (conf / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    platform = load_platform(conf)
    ledger = Ledger.open(platform.resolved_ledger_url)
    now = utcnow()
    records = json.loads(PROGRESS.read_text())
    runs, decisions, alerts, savepoints = [], [], [], []
    for name in names:
        ledger.ensure_job(name, desired_state="running", state="RUNNING", config_version="v1")
        ledger.update_job(name, backlog=4, last_batch_id=1000)
        for run in range(RUNS_PER_JOB):
            last = run == RUNS_PER_JOB - 1
            runs.append(
                {
                    "run_id": f"{name}-{run}",
                    "job": name,
                    "backend": "local",
                    "pid": 1,
                    "config_version": "v1",
                    "started_at": now - timedelta(minutes=30 * (RUNS_PER_JOB - run)),
                    "stopped_at": None if last else now - timedelta(minutes=30 * (RUNS_PER_JOB - run) - 29),
                    "exit_reason": None if last else ("failed: exit 137" if run % 20 == 0 else "stopped"),
                }
            )
        decisions += [
            {
                "job": name,
                "at": now - timedelta(seconds=DECISIONS_PER_JOB - index),
                "action": "restart" if index % 3 else "launch",
                "reason": "driver dead",
                "inputs": {"n": index},
            }
            for index in range(DECISIONS_PER_JOB)
        ]
        alerts += [
            {
                "job": name,
                "kind": "resolved" if index % 2 and index != ALERTS_PER_JOB - 1 else "driver_dead",
                "dedup_key": f"{name}/driver_dead",
                "severity": "critical",
                "payload": {},
                "status": "sent",
                "created_at": now,
                "attempts": 1,
                "next_attempt_at": now,
            }
            for index in range(ALERTS_PER_JOB)
        ]
        savepoints += [
            {
                "id": f"{name}-sp{index}",
                "job": name,
                "batch_id": 100 * index,
                "created_at": now - timedelta(hours=SAVEPOINTS_PER_JOB - index),
                "manifest_key": "k",
                "total_bytes": 10**6,
                "uploaded_bytes": 10**5,
                "status": "complete",
                "config_version": "v1",
            }
            for index in range(SAVEPOINTS_PER_JOB)
        ]
    # One insert per table: the ledger's own methods take a transaction per row.
    with ledger.engine.begin() as connection:
        for table, rows in (
            (runs_table, runs),
            (decisions_table, decisions),
            (alerts_table, alerts),
            (savepoints_table, savepoints),
        ):
            connection.execute(table.insert(), rows)
    for name in names:
        heartbeat = platform.job_runtime_dir(name) / "heartbeat.json"
        sample = BatchSample(1000, 100, 50.0, 80.0, 1200)
        write_heartbeat(
            heartbeat,
            Heartbeat(
                name, "run", 1, "progress", now.timestamp(), 1000, 10, 2048, now.isoformat(), recent=(sample,)
            ),
        )
        history = ProgressHistory()
        for minute in range(60):
            for batch in range(3):
                at = now - timedelta(minutes=60 - minute, seconds=-15 * batch)
                record = records[(minute + batch) % len(records)]
                history = history.with_batch({**record, "timestamp": at.isoformat()}, at.timestamp())
        write_history(heartbeat, history)
    return names


def timed(client: object, path: str) -> float:
    started = time.perf_counter()
    answer = client.get(path)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    if answer.status_code != 200:
        raise SystemExit(f"{path}: HTTP {answer.status_code}: {answer.text[:300]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="board-bench-") as temp:
        root = Path(temp)
        print(f"building a platform with {args.jobs} jobs ...", file=sys.stderr)
        names = build_platform(root, args.jobs)
        os.environ.update(
            {
                CONF_DIR_ENV: str(root / "conf"),
                "AIRFLOW_HOME": str(root / "airflow"),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
                "AIRFLOW__CORE__DAGS_FOLDER": str(root / "no-dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(64),
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            }
        )
        sys.path.insert(0, str(REPO / "plugins"))
        print(
            "migrating Airflow's metadata database (the auth check reads revoked tokens) ...", file=sys.stderr
        )
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
        from airflow.api_fastapi.app import create_app
        from fastapi.testclient import TestClient

        with TestClient(create_app()) as client:
            first = timed(client, "/streamwarden/api/board")
            figures: dict[str, list[float]] = {"version": [], "board": [], "job page": []}
            for index in range(args.requests):
                figures["version"].append(timed(client, "/api/v2/version"))
                figures["board"].append(timed(client, "/streamwarden/api/board"))
                figures["job page"].append(
                    timed(client, f"/streamwarden/api/jobs/{names[index % len(names)]}")
                )
            jobs_on_board = len(client.get("/streamwarden/api/board").json()["jobs"])
    floor = statistics.median(figures["version"])
    print(f"{jobs_on_board} jobs, {args.requests} requests each, in-process Airflow api-server app")
    print("| request | median | p95 | median / floor |")
    print("|---|---|---|---|")
    for name, values in figures.items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        median = statistics.median(values)
        print(f"| {name} | {median * 1000:.0f} ms | {p95 * 1000:.0f} ms | {median / floor:.1f}x |")
    print(f"| board, first request (job files validated) | {first * 1000:.0f} ms | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
