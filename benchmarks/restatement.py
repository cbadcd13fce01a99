"""Savepoints and rewinds, each against a baseline measured in the same run.

1. Savepoint throughput: `take_savepoint` of a RocksDB checkpoint (a deduplicating query whose
   state holds every event id) against a plain parallel boto3 upload (`upload_file`, as many
   threads) of the same files to the same SeaweedFS server; medians of alternating rounds, each
   savepoint into an empty store. Target: >= 0.8x.
2. Incremental savepoint: bytes uploaded by the next savepoint after ~5 % new state, against the
   savepoint's full size. Target: <= 10 %.
3. Rewind and replay: the router driver runs 100 batches (one landing file each, available-now);
   then the job is rewound to the savepoint taken before them and a `--replay-only` driver
   replays the 100 batches one at a time. Target: rewind + replay <= 2x the original run (both
   wall times include the driver's cold start).

    python -m benchmarks.run --only restatement
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml
from pyspark.sql import SparkSession

from benchmarks.throughput import rooted_platform
from ops.driver.session import ROCKSDB_PROVIDER
from ops.embedded.services import SeaweedS3, free_seaweed_ports
from ops.ledger.store import Ledger
from ops.recovery.rewind import execute_rewind, prepare_rewind
from ops.s3 import s3_client
from ops.savepoints.store import UPLOAD_THREADS, read_manifest, take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import CONF_DIR_ENV, DEFAULT_CONF_DIR, PlatformConfig, load_platform
from synthetic.generator import write_batch

STATE_JOB = "bench_state"
STATE_FILES = 8
STATE_EVENTS_PER_FILE = 100_000
SAVEPOINT_ROUNDS = 5
REPLAY_BATCHES = 100
REPLAY_EVENTS_PER_FILE = 500


@dataclass(frozen=True)
class Figure:
    name: str
    value: str
    baseline: str
    ratio: float
    target: str

    def row(self) -> tuple[str, ...]:
        return (self.name, self.value, self.baseline, f"{self.ratio:.2f}", self.target)


def _conf(workdir: Path, s3_port: int) -> PlatformConfig:
    """A platform rooted in `workdir`, its S3 on `s3_port`, with the router and the state job."""
    conf_dir = workdir / "conf"
    (conf_dir / "jobs").mkdir(parents=True)
    (conf_dir / "platform.yaml").write_text(yaml.safe_dump(rooted_platform(workdir, s3_port)))
    router = yaml.safe_load((DEFAULT_CONF_DIR / "jobs" / "router.yaml").read_text())
    router["operations"]["trigger"]["max_files_per_trigger"] = 1
    (conf_dir / "jobs" / "router.yaml").write_text(yaml.safe_dump(router, sort_keys=False))
    # The state job's spec only names its sink; its checkpoint comes from `build_state`.
    state = {**router, "name": STATE_JOB}
    state["pipeline"] = {**router["pipeline"], "sink": {"path": STATE_JOB}}
    state["operations"] = {**router["operations"], "metrics_port": router["operations"]["metrics_port"] + 50}
    (conf_dir / "jobs" / f"{STATE_JOB}.yaml").write_text(yaml.safe_dump(state, sort_keys=False))
    return load_platform(conf_dir)


def build_state(spark: SparkSession, platform: PlatformConfig, landing: Path) -> None:
    """Run the deduplicating query over the state landing files present now (available-now)."""
    query = (
        spark.readStream.format("text")
        .load(str(landing))
        .selectExpr("get_json_object(value, '$.event_id') AS event_id")
        .dropDuplicates(["event_id"])
        .writeStream.format("parquet")
        .option("checkpointLocation", str(platform.checkpoint_root / STATE_JOB))
        .option("path", str(platform.lake_root / STATE_JOB))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def savepoint_figures(platform: PlatformConfig, ledger: Ledger, echo: Callable[[str], None]) -> list[Figure]:
    landing = platform.landing_root / "state"
    for seed in range(STATE_FILES):
        write_batch(landing, STATE_EVENTS_PER_FILE, seed=seed, file_name=f"state-{seed}.json")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
        .getOrCreate()
    )
    build_state(spark, platform, landing)

    client = s3_client(platform)
    checkpoint, sink = platform.checkpoint_root / STATE_JOB, platform.lake_root / STATE_JOB
    savepoint_runs: list[float] = []
    plain_runs: list[float] = []
    savepoints = []
    # Alternating rounds, each savepoint into an empty store (a prefix of its own), medians kept:
    # one copy takes about a second, so a single round is at the mercy of the other core's load.
    for round_number in range(SAVEPOINT_ROUNDS):
        prefix = platform.s3.savepoint_prefix if round_number == 0 else f"round-{round_number}"
        fresh = platform.model_copy(
            update={"s3": platform.s3.model_copy(update={"savepoint_prefix": prefix})}
        )
        started = time.monotonic()
        taken = take_savepoint(fresh, ledger, find_job(STATE_JOB, fresh.conf_dir))
        savepoint_runs.append(time.monotonic() - started)
        savepoints.append(taken)
        manifest = read_manifest(fresh, taken)
        local = [
            (checkpoint / entry["path"].removeprefix("checkpoint/"))
            if entry["path"].startswith("checkpoint/")
            else sink / entry["path"].removeprefix("sink/")
            for entry in manifest["files"]
        ]
        keys = [f"plain-{round_number}/{p.name}-{hash(p)}" for p in local]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
            list(pool.map(lambda p, key: client.upload_file(str(p), platform.s3.bucket, key), local, keys))
        plain_runs.append(time.monotonic() - started)
        echo(
            f"  round {round_number + 1}: savepoint of {len(local)} files, {taken.total_bytes / 1e6:.1f} MB "
            f"in {savepoint_runs[-1]:.2f}s; plain boto3 upload of the same files {plain_runs[-1]:.2f}s"
        )
    savepoint_seconds, plain_seconds = statistics.median(savepoint_runs), statistics.median(plain_runs)
    full = savepoints[0]

    # ~5 % new state: new event ids amounting to a twentieth of those held.
    write_batch(landing, STATE_FILES * STATE_EVENTS_PER_FILE // 20, seed=1000, file_name="state-more.json")
    build_state(spark, platform, landing)
    spark.stop()
    incremental = take_savepoint(platform, ledger, find_job(STATE_JOB, platform.conf_dir))
    share = incremental.uploaded_bytes / incremental.total_bytes
    echo(
        f"  incremental savepoint: {incremental.uploaded_bytes / 1e6:.1f} "
        f"of {incremental.total_bytes / 1e6:.1f} MB"
    )
    return [
        Figure(
            "savepoint throughput (MB/s)",
            f"{full.total_bytes / 1e6 / savepoint_seconds:.1f}",
            f"{full.total_bytes / 1e6 / plain_seconds:.1f} (plain boto3)",
            plain_seconds / savepoint_seconds,
            ">= 0.8",
        ),
        Figure(
            "incremental savepoint after ~5 % new state (MB uploaded)",
            f"{incremental.uploaded_bytes / 1e6:.2f}",
            f"{incremental.total_bytes / 1e6:.2f} (full size)",
            share,
            "<= 0.10",
        ),
    ]


def _driver(platform: PlatformConfig, run_id: str, *flags: str) -> float:
    """Run the router driver to completion; its wall time."""
    env = {**os.environ, CONF_DIR_ENV: str(platform.conf_dir), "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "jobs.runner", "--job", "router", "--run-id", run_id, *flags],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def replay_figures(platform: PlatformConfig, ledger: Ledger, echo: Callable[[str], None]) -> list[Figure]:
    landing = platform.landing_root / "events"
    write_batch(landing, REPLAY_EVENTS_PER_FILE, seed=0, file_name="events-0000.json")
    _driver(platform, "bench-first", "--available-now")
    savepoint = take_savepoint(platform, ledger, find_job("router", platform.conf_dir))
    for seed in range(1, REPLAY_BATCHES + 1):
        write_batch(landing, REPLAY_EVENTS_PER_FILE, seed=seed, file_name=f"events-{seed:04d}.json")
    original = _driver(platform, "bench-original", "--available-now")
    echo(f"  original: {REPLAY_BATCHES} batches in {original:.1f}s")

    started = time.monotonic()
    plan = prepare_rewind(platform, ledger, "router", savepoint_id=savepoint.id)
    execute_rewind(platform, plan)
    rewind_seconds = time.monotonic() - started
    replay_seconds = _driver(platform, "bench-replay", "--replay-only")
    echo(
        f"  rewind {rewind_seconds:.1f}s, replay of {len(plan.replay_batches)} batches {replay_seconds:.1f}s"
    )
    total = rewind_seconds + replay_seconds
    return [
        Figure(
            f"rewind + replay of {len(plan.replay_batches)} batches",
            f"{total:.1f} s ({rewind_seconds:.1f} rewind)",
            f"{original:.1f} s (original run)",
            total / original,
            "<= 2.0",
        )
    ]


def benchmark(workdir: Path, echo: Callable[[str], None]) -> list[Figure]:
    """Every figure of this benchmark, with an embedded S3 server of its own."""
    shutil.rmtree(workdir, ignore_errors=True)
    ports = free_seaweed_ports()
    platform = _conf(workdir, ports.s3)
    server = SeaweedS3.for_platform(platform)
    assert server is not None
    server.start()
    try:
        ledger = Ledger.open(platform.resolved_ledger_url)
        return savepoint_figures(platform, ledger, echo) + replay_figures(platform, ledger, echo)
    finally:
        server.stop()
