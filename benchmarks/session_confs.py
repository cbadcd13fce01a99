"""The CPU of a short-lived Spark JVM running the router's real query, per set of Spark SQL confs.

python -m benchmarks.session_confs [--rounds N] [--batches N]

What most test JVMs do: start, then run a job's streaming query over a few small landing files, a
micro-batch each, with little data in every batch. Each round starts one fresh `python` per conf
set; it opens a local[2] SparkSession (no UI, the tests' JVM options from `JDK_JAVA_OPTIONS`),
runs the router's query (`jobs.runner.plan_job`, available-now, a landing file a batch: `--batches`
files of 200 events) into a scratch lake, reads the sink back, and prints the JVM's CPU time (user
+ sys of the JVM and its reaped children, from /proc). The conf sets:

* `as tested`: the confs the tests' sessions have today (the baseline);
* `no whole-stage codegen`: `spark.sql.codegen.wholeStage=false`, no Janino compile per stage;
* `no AQE`: `spark.sql.adaptive.enabled=false`, no re-planning between a query's stages;
* both of the above.

CPU time is the steadier figure on a busy machine; the ratio is each set's median CPU over the
baseline's median. Every set must write the same rows (the probe prints the sink's row count,
checked equal across sets).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.rotated import Timing, print_table, run_rounds
from tests.support.jvm import BASE_OPTIONS

CONF_SETS: dict[str, dict[str, str]] = {
    "as tested": {},
    "no whole-stage codegen": {"spark.sql.codegen.wholeStage": "false"},
    "no AQE": {"spark.sql.adaptive.enabled": "false"},
    "both": {"spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"},
}

# Run in the fresh interpreter: prints "<sink rows> <jvm cpu seconds>" as its last line.
PROBE = """
import json, os, sys
from pathlib import Path
from pyspark.sql import SparkSession
from jobs.runner import plan_job
from jobs.runtime import with_trigger
from ops.spec.job import find_job
from ops.spec.platform import StorageConfig, load_platform
from synthetic.generator import write_batch

root, batches, confs = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
platform = load_platform()
platform = platform.model_copy(
    update={"storage": StorageConfig(**{k: root / k for k in StorageConfig.model_fields})}
)
spec = find_job("router", platform.conf_dir)
operations = spec.operations.model_copy(
    update={"trigger": spec.operations.trigger.model_copy(update={"max_files_per_trigger": 1})}
)
spec = spec.model_copy(update={"operations": operations})
for seed in range(batches):
    write_batch(platform.landing_root / spec.pipeline.source.path, 200, 0.05, seed)
builder = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.shuffle.partitions", "2")
)
for key, value in confs.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
query = with_trigger(plan_job(platform, spec), spec, available_now=True)(spark).start()
query.awaitTermination()
assert query.exception() is None, query.exception()
rows = spark.read.parquet(str(platform.lake_root / spec.pipeline.sink.path)).count()
fields = open(f"/proc/{spark.sparkContext._gateway.proc.pid}/stat").read().rsplit(")", 1)[1].split()
# utime, stime, cutime, cstime: fields 14-17 of proc(5), in clock ticks.
print(rows, sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK"))
spark.stop()
"""


def probe(confs: dict[str, str], workdir: Path, batches: int) -> Timing:
    """One fresh JVM with `confs` over a fresh scratch platform: rows, its CPU and the wall time."""
    with tempfile.TemporaryDirectory(dir=workdir) as root:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-c", PROBE, root, str(batches), json.dumps(confs)],
            env={
                **os.environ,
                "JDK_JAVA_OPTIONS": BASE_OPTIONS,
                "PYSPARK_PYTHON": sys.executable,
            },
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"the probe failed:\n{result.stderr[-4000:]}")
    rows, cpu = result.stdout.split()[-2:]
    return Timing(rows=int(rows), cpu=float(cpu), wall=wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=6)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="streamwarden-confs-") as workdir:
        timings = run_rounds(
            list(CONF_SETS), args.rounds, lambda name: probe(CONF_SETS[name], Path(workdir), args.batches)
        )
    rows = {t.rows for runs in timings.values() for t in runs}
    assert len(rows) == 1, f"the conf sets wrote different rows: {rows}"
    labels = {name: " ".join(f"{k}={v}" for k, v in confs.items()) for name, confs in CONF_SETS.items()}
    print(f"{args.batches} batches a probe")
    print_table(timings, labels, "confs", "as tested")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
