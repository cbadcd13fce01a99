"""The CPU and wall time of a short-lived Spark JVM, per set of JVM options, in alternating rounds.

python -m benchmarks.jvm_options [--rounds N]

The tests start well over a hundred short-lived JVMs (local sessions, drivers, compactions,
readers), each working on little data, so the JVM's start and its first job are most of their
cost. Each round starts one fresh `python` per option set; it opens a local[2] SparkSession (no
UI), runs a group-by over 20,000 rows into Parquet, reads it back and prints the JVM's CPU time
(user + sys of the JVM and its reaped children, from /proc) before stopping. The option sets:

* `defaults`: the JVM's own choice, C2 through tiered compilation and G1 (the baseline);
* `C1 only`: `-XX:TieredStopAtLevel=1`, no C2 compiler threads;
* `C1 + serial GC`: the above and `-XX:+UseSerialGC`, what tests/conftest.py sets;
* `serial GC`: `-XX:+UseSerialGC` alone;
* `C1 + serial GC + class-data sharing`: what `make test` sets, C1 and the serial collector with
  the class-data archive `tests/support/jvm.py` dumps (once, before the rounds) mapped.

The options reach the JVM through `JDK_JAVA_OPTIONS`, as in the tests. CPU time is the steadier
figure on a busy machine; the ratio is each set's median CPU over the defaults' median.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.rotated import Timing, print_table, run_rounds
from tests.support.jvm import sharing_options

OPTION_SETS = {
    "defaults": "",
    "C1 only": "-XX:TieredStopAtLevel=1",
    "C1 + serial GC": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "serial GC": "-XX:+UseSerialGC",
}

# Run in the fresh interpreter: prints "<jvm cpu seconds>" as its last line.
PROBE = """
import os, sys
from pyspark.sql import SparkSession

out = sys.argv[1]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.range(20000).selectExpr("id % 7 AS k", "id").groupBy("k").count().write.mode("overwrite").parquet(out)
assert spark.read.parquet(out).count() == 7
fields = open(f"/proc/{spark.sparkContext._gateway.proc.pid}/stat").read().rsplit(")", 1)[1].split()
# utime, stime, cutime, cstime: fields 14-17 of proc(5), in clock ticks.
print(sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK"))
spark.stop()
"""


def probe(options: str, workdir: Path) -> Timing:
    """One fresh JVM with `options`: its CPU seconds and the wall time of the whole process."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(workdir / "out")],
        env={**os.environ, "JDK_JAVA_OPTIONS": options, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=True,
    )
    return Timing(cpu=float(result.stdout.split()[-1]), wall=time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    option_sets = {**OPTION_SETS, "C1 + serial GC + class-data sharing": sharing_options()}
    with tempfile.TemporaryDirectory(prefix="streamwarden-jvms-") as workdir:
        timings = run_rounds(
            list(option_sets), args.rounds, lambda name: probe(option_sets[name], Path(workdir))
        )
    print_table(timings, option_sets, "options", "defaults")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
