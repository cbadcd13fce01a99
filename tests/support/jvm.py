"""The options of every JVM the tests start, and the class-data archive those JVMs share.

Every JVM the tests start (local sessions, drivers, compactions, backfills, the standalone
cluster) works on little data, so most of its CPU is its start: loading, verifying and compiling
Spark's classes. Two things cut it, each measured by `python -m benchmarks.jvm_options`
(benchmarks/RESULTS.md):

- C1 only with the serial collector (`BASE_OPTIONS`);
- class-data sharing: a dynamic CDS archive (JDK 17's `-XX:ArchiveClassesAtExit`) of the classes
  a Spark JVM loads, dumped once by a probe that does what the tests' JVMs do (a local session
  with a Hive catalog, a streaming query from JSON files into Parquet, a group-by), and mapped by
  every later JVM (`-XX:SharedArchiveFile`), which then loads none of those classes itself.

The archive is kept in the user's cache (`~/.cache/streamwarden/cds/`, or under
`$XDG_CACHE_HOME`), not in the checkout, so a fresh clone at the same place (CI's) maps the one an
earlier clone dumped instead of spending a minute or two on its own. It is named by what it
depends on (the JVM's version, PySpark's version and location, the options and the probe): a
changed JDK or PySpark, or a checkout elsewhere, gets a new one, since a JVM whose class path does
not match the archive's starts without it, as it would with no archive at all. Archives unused
for `STALE_DAYS` are deleted when another is dumped (200 MB each);
`-Xlog:cds*=off` keeps CDS's notices out of the processes' logs. The platform's own JVMs get none
of this: it is `JDK_JAVA_OPTIONS` in the tests' environment (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
ARCHIVE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamwarden" / "cds"
STALE_DAYS = 14
QUIET = "-Xlog:cds*=off"
# A cold dump on a loaded machine: a Spark start, three small jobs and a 200 MB archive written.
DUMP_TIMEOUT = 900

# Run in a fresh interpreter, in a scratch directory (the Derby metastore and the data go there);
# prints the JVM's pid, which writes the archive as it exits after this process.
DUMP_PROBE = """
import sys
from pathlib import Path
from pyspark.sql import SparkSession

scratch = Path(sys.argv[1])
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
    .enableHiveSupport()
    .getOrCreate()
)
landing = scratch / "landing"
landing.mkdir()
(landing / "a.json").write_text("".join(f'{{"k": {i % 7}, "v": "{i}"}}\\n' for i in range(2000)))
query = (
    spark.readStream.schema("k INT, v STRING").json(str(landing))
    .writeStream.format("parquet").partitionBy("k")
    .option("checkpointLocation", str(scratch / "checkpoint"))
    .trigger(availableNow=True)
    .start(str(scratch / "sink"))
)
query.awaitTermination()
spark.read.parquet(str(scratch / "sink")).groupBy("k").count().write.saveAsTable("counts")
assert spark.sql("SELECT sum(count) AS n FROM counts").collect()[0].n == 2000
print(spark.sparkContext._gateway.proc.pid, flush=True)
spark.stop()
"""


def java_version() -> str:
    return subprocess.run(
        ["java", "-version"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "JDK_JAVA_OPTIONS": ""},
    ).stderr


def class_archive(options: str = BASE_OPTIONS) -> Path:
    """The archive for JVMs started with `options`, dumped first if there is none yet.
    RuntimeError, with the probe's output, if the dump fails."""
    import pyspark

    # The class path of PySpark's JVMs is its jars' absolute paths: an archive serves one location.
    location = str(Path(pyspark.__file__).resolve().parent)
    key = hashlib.sha256(
        "\n".join([java_version(), pyspark.__version__, location, options, DUMP_PROBE]).encode()
    )
    archive = ARCHIVE_DIR / f"spark-{key.hexdigest()[:16]}.jsa"
    if archive.is_file():
        archive.touch()  # in use: not stale
        return archive
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="streamwarden-cds-") as scratch:
        probe = subprocess.run(
            [sys.executable, "-c", DUMP_PROBE, scratch],
            cwd=scratch,
            env={**os.environ, "JDK_JAVA_OPTIONS": f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}"},
            capture_output=True,
            text=True,
            timeout=DUMP_TIMEOUT,
            check=False,
        )
        if probe.returncode != 0:
            raise RuntimeError(f"the class-data probe failed:\n{probe.stderr[-4000:]}")
        # The JVM outlives the probe (PySpark does not wait for it) and dumps as it exits.
        jvm = int(probe.stdout.split()[-1])
        deadline = time.monotonic() + DUMP_TIMEOUT
        while _alive(jvm):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the class-data probe's JVM {jvm} did not exit within {DUMP_TIMEOUT} s")
            time.sleep(0.5)
    if not partial.is_file():
        raise RuntimeError(f"the class-data probe's JVM wrote no archive:\n{probe.stderr[-4000:]}")
    partial.replace(archive)
    unused_since = time.time() - STALE_DAYS * 86400
    for other in ARCHIVE_DIR.glob("spark-*.jsa"):
        if other != archive and other.stat().st_mtime < unused_since:
            other.unlink(missing_ok=True)  # another JDK's, PySpark's or checkout's, long unused
    return archive


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie no longer does: it waits only to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def sharing_options(options: str = BASE_OPTIONS) -> str:
    """`options` and the flags that map the class archive for them (dumped first if needed)."""
    return f"{options} -XX:SharedArchiveFile={class_archive(options)} {QUIET}"


def main() -> int:
    """`python -m tests.support.jvm`: print the options for `JDK_JAVA_OPTIONS` (`make test`), the
    archive dumped first if needed; without it, when the dump fails (said on stderr)."""
    try:
        print(sharing_options())
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"no class-data archive, the tests' JVMs start without one: {error}", file=sys.stderr)
        print(BASE_OPTIONS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
