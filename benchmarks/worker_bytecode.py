"""What a PySpark Python worker spends importing `pyspark`, from the zips with and without bytecode.

python -m benchmarks.worker_bytecode [--rounds N]

Each of a job's Python workers imports `pyspark.worker` (and through it `pyspark.sql`, pandas and
pyarrow) after the daemon forks it, from `$SPARK_HOME/python/lib/pyspark.zip` and py4j's zip,
which Spark puts first on the workers' path. Each round starts one fresh interpreter per side with
that path, as Spark starts them, and imports what a worker imports (`pyspark.daemon`, then
`pyspark.worker`); its CPU seconds (user + sys) are the figure:

* `sources only`: copies of the installed zips without their `.pyc` entries, i.e. the zips as
  PySpark's wheel ships them (the baseline);
* `with bytecode`: the installed zips, with the bytecode `ops.driver.worker_bytecode` added.

pandas and pyarrow come from site-packages, compiled at install, on both sides.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from benchmarks.rotated import Timing, print_table, run_rounds
from ops.driver.worker_bytecode import worker_zips

PROBE = "import pyspark.daemon, pyspark.worker"


def sources_only(archive: Path, into: Path) -> Path:
    """A copy of `archive` in `into` without its bytecode."""
    copy = into / archive.name
    with zipfile.ZipFile(archive) as original, zipfile.ZipFile(copy, "w", zipfile.ZIP_DEFLATED) as stripped:
        for entry in original.infolist():
            if not entry.filename.endswith(".pyc"):
                stripped.writestr(entry, original.read(entry))
    return copy


def probe(zips: list[Path]) -> Timing:
    """One fresh interpreter importing what a worker imports with `zips` first on its path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(str(path) for path in zips)},
        check=True,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return Timing(cpu=cpu, wall=wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    installed = worker_zips()
    with tempfile.TemporaryDirectory(prefix="streamwarden-worker-zips-") as scratch:
        sides = {
            "sources only": [sources_only(archive, Path(scratch)) for archive in installed],
            "with bytecode": installed,
        }
        timings = run_rounds(list(sides), args.rounds, lambda name: probe(sides[name]))
    labels = {name: ", ".join(path.name for path in zips) for name, zips in sides.items()}
    print_table(timings, labels, "worker's zips", "sources only", cpu_of="worker")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
