"""`warden status` wall and CPU time in fresh interpreters, against baselines measured in the same run.

python -m benchmarks.cli_latency [--runs N] [--against CHECKOUT] [--landing-files N]

It builds a throwaway platform (its own conf dir, runtime and SQLite ledger under a temp dir) that
looks like one that has run for a while: every job of conf/jobs with 200 runs, 500 decisions and
50 alerts in the ledger, the router with an open run, a heartbeat and `--landing-files` landing
files of which its checkpoint's source log has read all but 50. Then, in alternating rounds, it
times each command as a new process:

* `python -c pass`: the interpreter's own start, the floor of any CLI;
* `python -c "import sqlalchemy" + one query of the ledger`: the floor of a CLI that reads the ledger;
* `warden status` (`python -m ops.cli status`) of this checkout;
* with `--against`, `warden status` of another checkout (e.g. `git archive <commit> | tar -x -C DIR`),
  run with the same .venv, its own directory first on sys.path.

Each command runs twice per round: with the .venv's bytecode (`uv sync --compile-bytecode`, as
`make install` does) and without bytecode for anything but the standard library, as after a plain
`uv sync` on a machine that sets PYTHONDONTWRITEBYTECODE: every installed module is compiled from
source on every call (a PYTHONPYCACHEPREFIX holding the standard library's bytecode alone, and
PYTHONDONTWRITEBYTECODE=1). The repo's own modules are compiled from source in both modes when
the caller's environment sets PYTHONDONTWRITEBYTECODE. CPU time (user + sys of the child) is the
steadier figure on a busy machine; wall time is what the operator waits.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import yaml

from ops.clock import utcnow
from ops.driver.telemetry import BatchSample, Heartbeat, write_heartbeat
from ops.ledger.records import RunRecord
from ops.ledger.store import Ledger
from ops.spec.job import load_jobs
from ops.spec.paths import JobPaths
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, PlatformConfig, load_platform

REPO = Path(__file__).resolve().parents[1]
RUNS_PER_JOB, DECISIONS_PER_JOB, ALERTS_PER_JOB = 200, 500, 50
UNREAD_FILES = 50

LEDGER_QUERY = """
import sys
import sqlalchemy as sa

engine = sa.create_engine(sys.argv[1])
with engine.connect() as connection:
    print(connection.execute(sa.text("SELECT name, state, last_batch_id FROM jobs")).all())
"""


@dataclass(frozen=True)
class Command:
    label: str
    argv: list[str]
    cwd: Path


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float


def build_platform(root: Path, landing_files: int) -> PlatformConfig:
    """A platform under `root` with a ledger, heartbeat, landing files and source log in use."""
    conf = root / "conf"
    (conf / "jobs").mkdir(parents=True)
    runtime = root / "runtime"
    settings = {
        "storage": {
            "runtime_root": str(runtime),
            "landing_root": str(runtime / "landing"),
            "lake_root": str(runtime / "lake"),
            "checkpoint_root": str(runtime / "checkpoints"),
        },
        "ledger": {"url": f"sqlite:///{runtime / 'ledger.db'}"},
    }
    (conf / "platform.yaml").write_text(yaml.safe_dump(settings))
    for job_file in (DEFAULT_CONF_DIR / "jobs").glob("*.yaml"):
        shutil.copy(job_file, conf / "jobs" / job_file.name)
    shutil.copytree(DEFAULT_CONF_DIR / "mappings", conf / "mappings")
    platform = load_platform(conf)
    ledger = Ledger.open(platform.resolved_ledger_url)
    now = utcnow()
    for spec in load_jobs(platform.conf_dir).specs.values():
        ledger.ensure_job(spec.name, desired_state="running", state="RUNNING", config_version="v1")
        for number in range(RUNS_PER_JOB):
            started = now - timedelta(minutes=10 * (RUNS_PER_JOB - number))
            ledger.start_run(
                RunRecord(
                    run_id=f"{spec.name}-{number}",
                    job=spec.name,
                    backend="local",
                    pid=None,
                    app_id=None,
                    metrics_port=spec.operations.metrics_port,
                    log_path=None,
                    config_version="v1",
                    started_at=started,
                    stopped_at=None if number == RUNS_PER_JOB - 1 else started + timedelta(minutes=9),
                    exit_reason=None if number == RUNS_PER_JOB - 1 else "failed: driver process is gone",
                )
            )
        for number in range(DECISIONS_PER_JOB):
            ledger.record_decision(spec.name, "launch", f"decision {number}", {"number": number})
        for number in range(ALERTS_PER_JOB):
            ledger.enqueue_alert(spec.name, "down", f"{spec.name}:down:{number}", "critical", {}, "sent")
    router = JobPaths.of(platform, load_jobs(platform.conf_dir).specs["router"])
    write_heartbeat(
        router.heartbeat,
        Heartbeat(
            job="router",
            run_id=f"router-{RUNS_PER_JOB - 1}",
            pid=0,
            event="progress",
            at=now.timestamp(),
            batch_id=landing_files // 10,
            recent=tuple(BatchSample(i, 2000, 200.0, 400.0, 5000) for i in range(10)),
        ),
    )
    (landing,) = router.landing.values()
    landing.mkdir(parents=True)
    files = [landing / f"events-{number:07d}.json" for number in range(landing_files)]
    for path in files:
        path.write_text('{"event_id": "e"}\n')
    # The file source's log as Spark leaves it: a compacted entry, then the entries after it.
    source_log = router.sources / "0"
    source_log.mkdir(parents=True)
    read = files[: landing_files - UNREAD_FILES]
    batches = [read[start : start + 10] for start in range(0, len(read), 10)]
    compact = (len(batches) - 1) // 10 * 10 - 1
    for batch_id, batch in enumerate(batches):
        if batch_id < compact:
            continue
        covered = [(b, p) for b in range(batch_id + 1) for p in batches[b]] if batch_id == compact else []
        records = covered or [(batch_id, path) for path in batch]
        name = f"{batch_id}.compact" if batch_id == compact else str(batch_id)
        lines = [json.dumps({"path": f"file://{p}", "timestamp": 0, "batchId": b}) for b, p in records]
        (source_log / name).write_text("\n".join(["v1", *lines]) + "\n")
    return platform


def stdlib_bytecode(prefix: Path, commands: list[Command], env: dict[str, str]) -> dict[str, str]:
    """An environment whose bytecode cache (under `prefix`) holds the standard library's only.

    Each command runs once writing its bytecode under `prefix`; then everything but the standard
    library's part of the tree goes, and the environment forbids writing any more.
    """
    writing = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    for command in commands:
        subprocess.run(
            command.argv,
            cwd=command.cwd,
            env=writing | {"PYTHONPYCACHEPREFIX": str(prefix)},
            capture_output=True,
            check=True,
        )
    stdlib = prefix / Path(sysconfig.get_paths()["stdlib"]).resolve().relative_to("/")
    kept = prefix.parent / "stdlib-bytecode"
    stdlib.rename(kept)
    shutil.rmtree(prefix)
    stdlib.parent.mkdir(parents=True)
    kept.rename(stdlib)
    return env | {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(prefix)}


def timed(command: Command, env: dict[str, str]) -> Timing:
    """Run `command` once; its wall time and the CPU time (user + sys) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = os.times().elapsed
    result = subprocess.run(command.argv, cwd=command.cwd, env=env, capture_output=True, text=True)
    wall = os.times().elapsed - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{command.label} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return Timing(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cli_latency", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=7, help="rounds; each command runs once per round")
    parser.add_argument("--against", type=Path, help="another checkout whose `warden status` to time too")
    parser.add_argument("--landing-files", type=int, default=3600, help="router landing files (1/s: an hour)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="warden-cli-latency-") as scratch:
        platform = build_platform(Path(scratch) / "platform", args.landing_files)
        python = sys.executable
        commands = [
            Command("python -c pass", [python, "-c", "pass"], REPO),
            Command(
                "import sqlalchemy + one ledger query",
                [python, "-c", LEDGER_QUERY, platform.resolved_ledger_url],
                REPO,
            ),
            Command("warden status", [python, "-m", "ops.cli", "status"], REPO),
        ]
        if args.against:
            against = args.against.resolve()
            commands.append(
                Command(f"warden status ({against.name})", [python, "-m", "ops.cli", "status"], against)
            )
        base_env = os.environ | {CONF_DIR_ENV: str(platform.conf_dir)}
        modes = {
            "bytecode": base_env,
            "no bytecode": stdlib_bytecode(Path(scratch) / "bytecode", commands, base_env),
        }
        # One untimed call of each, so the ledger and page cache are warm for every round alike.
        for command in commands:
            timed(command, base_env)
        timings: dict[tuple[str, str], list[Timing]] = {}
        for number in range(1, args.runs + 1):
            for mode, env in modes.items():
                for command in commands:
                    timing = timed(command, env)
                    timings.setdefault((command.label, mode), []).append(timing)
                    took = f"{timing.wall:.2f} s (cpu {timing.cpu:.2f} s)"
                    print(f"round {number} {mode:<11} {command.label}: {took}", flush=True)
        status_output = subprocess.run(
            [python, "-m", "ops.cli", "status"], cwd=REPO, env=base_env, capture_output=True, text=True
        ).stdout

    print(f"\n`warden status` of the benchmark platform ({args.landing_files} router landing files):")
    print(status_output)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"| command (medians of {args.runs}) | bytecode: wall | cpu | no bytecode: wall | cpu |")
    print("|---|---|---|---|---|")
    medians: dict[tuple[str, str], Timing] = {}
    for command in commands:
        cells = []
        for mode in modes:
            runs = timings[(command.label, mode)]
            median = Timing(statistics.median(t.wall for t in runs), statistics.median(t.cpu for t in runs))
            medians[(command.label, mode)] = median
            cells += [f"{median.wall:.2f} s", f"{median.cpu:.2f} s"]
        print(f"| {command.label} | {' | '.join(cells)} |")
    for mode in modes:
        status = medians[("warden status", mode)]
        floor = medians[("import sqlalchemy + one ledger query", mode)]
        line = (
            f"{mode}: warden status / (import sqlalchemy + one ledger query) = "
            f"{status.wall / floor.wall:.2f} wall, {status.cpu / floor.cpu:.2f} cpu"
        )
        if args.against:
            other = medians[(commands[-1].label, mode)]
            line += f"; {commands[-1].label} / warden status = {other.wall / status.wall:.2f} wall, "
            line += f"{other.cpu / status.cpu:.2f} cpu"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
