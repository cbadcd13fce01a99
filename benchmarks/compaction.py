"""Compaction throughput against a plain Spark read -> write of the same partition, and the gate's share.

python -m benchmarks.compaction [--rows N] [--files N] [--rounds N]

One sink partition of `--rows` rows in `--files` small Parquet files, listed by a file-sink log
as a streaming sink leaves them. Each round, in the same Spark session (local[2]), alternating:

- baseline: `spark.read.parquet(files).repartition(n).write.parquet(dir)`, the same number of
  output files compaction writes;
- compaction: `ops.warehouse.compact.compact_partition`, the real write-audit-publish (ledger
  on SQLite, catalog in a Hive metastore on an embedded PostgreSQL), with its step times.

It prints rows/s of each, the ratio with the gate (audit) excluded (target >= 0.8), and the
gate's share of the whole compaction (target <= 25 %).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTITION = {"route": "purchases", "event_date": "2026-11-20", "event_hour": "10"}


def write_sink(spark: object, sink: Path, rows: int, files: int) -> None:
    """`files` Parquet files of the partition, and a sink log that lists them as committed."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    directory = sink.joinpath(*(f"{k}={v}" for k, v in PARTITION.items()))
    frame = spark.range(rows).select(
        F.format_string("e%010d", "id").alias("event_id"),
        F.format_string("u%05d", F.col("id") % 5000).alias("user_id"),
        (F.col("id") % 1000 / 10).alias("amount"),
        F.timestamp_seconds(F.lit(1_795_600_800) + F.col("id") % 3600).alias("event_time"),
    )
    frame.repartition(files).write.parquet(str(directory))
    log = sink / "_spark_metadata"
    log.mkdir(parents=True)
    records = [
        {
            "path": path.as_uri(),
            "size": path.stat().st_size,
            "isDir": False,
            "modificationTime": int(path.stat().st_mtime * 1000),
            "blockReplication": 1,
            "blockSize": 33554432,
            "action": "add",
        }
        for path in sorted(directory.glob("*.parquet"))
    ]
    (log / "0").write_text("v1\n" + "\n".join(json.dumps(record) for record in records))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compaction", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=200, help="small input files (micro-batch output)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    from pyspark.sql import SparkSession

    from ops.alerts import AlertCenter
    from ops.embedded.services import EmbeddedPostgres
    from ops.ledger.store import Ledger
    from ops.ports import free_loopback_port
    from ops.spec.job import find_job
    from ops.spec.platform import PlatformConfig
    from ops.warehouse.compact import compact_partition
    from ops.warehouse.metastore import metastore_conf
    from ops.warehouse.rewrite import read_partition
    from ops.warehouse.sinklog import sink_partitions
    from ops.warehouse.table import WarehouseTable, ensure_table

    root = Path(tempfile.mkdtemp(prefix="streamwarden-bench-compaction-"))
    root.chmod(0o755)
    postgres = EmbeddedPostgres(root / "pg", free_loopback_port(), root / "pg-runtime")
    postgres.start()
    try:
        platform = PlatformConfig.model_validate(
            {
                "storage": {"runtime_root": str(root / "runtime"), "lake_root": str(root / "lake")},
                "ledger": {"url": f"sqlite:///{root / 'ledger.db'}"},
                "postgres": {"port": postgres.port, "data_dir": str(root / "pg")},
                "warehouse": {"root": str(root / "warehouse")},
                "slack": {"webhook_url": None},
            }
        )
        builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        for key, value in {
            **metastore_conf(platform),
            **platform.spark.network_conf(),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "4",
        }.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        spec = find_job("router")
        sink = root / "lake" / "router"
        write_sink(spark, sink, args.rows, args.files)
        ledger = Ledger.open(platform.resolved_ledger_url)
        table = WarehouseTable.of(platform, "router", spec.pipeline.partition_columns)
        [partition] = sink_partitions(sink, table)
        ensure_table(spark, table, read_partition(spark, sink, list(partition.files)).schema)
        target_bytes = int(
            (spec.operations.compaction.target_file_mb if spec.operations.compaction else 128) * 2**20
        )
        input_bytes = sum(path.stat().st_size for path in partition.files)
        output_files = max(1, math.ceil(input_bytes / target_bytes))
        alerts = AlertCenter(ledger, platform.slack)
        print(
            f"partition {partition.key}: {args.rows:,} rows in {len(partition.files)} files, "
            f"{input_bytes / 1e6:.1f} MB -> {output_files} file(s); audit: {spec.operations.quality}",
            flush=True,
        )
        baseline, write, gate, total = [], [], [], []
        for round_index in range(args.rounds):
            out = root / f"baseline-{round_index}"
            started = time.monotonic()
            spark.read.parquet(*map(str, partition.files)).repartition(output_files).write.parquet(str(out))
            baseline.append(time.monotonic() - started)
            shutil.rmtree(out)
            started = time.monotonic()
            outcome = compact_partition(spark, ledger, alerts, spec, table, sink, partition)
            total.append(time.monotonic() - started)
            assert outcome.status == "published" and outcome.output_rows == args.rows, outcome.line()
            write.append(outcome.seconds["write"] + outcome.seconds["publish"])
            gate.append(outcome.seconds["audit"])
            print(
                f"round {round_index + 1}: baseline {baseline[-1]:.1f} s; compaction {total[-1]:.1f} s "
                f"(write {outcome.seconds['write']:.1f}, audit {outcome.seconds['audit']:.1f}, "
                f"publish {outcome.seconds['publish']:.2f}; gate's share {gate[-1] / total[-1]:.0%})",
                flush=True,
            )
        rows = args.rows
        base_seconds, write_seconds = statistics.median(baseline), statistics.median(write)
        base_rate, wap_rate = rows / base_seconds, rows / write_seconds
        share = statistics.median(g / t for g, t in zip(gate, total, strict=True))
        command = f"python -m benchmarks.compaction --rows {rows} --files {args.files} --rounds {args.rounds}"
        lines = [
            f"{datetime.now(UTC):%Y-%m-%d}: `{command}`",
            "",
            "| figure | value | target |",
            "|---|---|---|",
            f"| plain Spark read -> write (baseline), median | {base_seconds:.1f} s, "
            f"{base_rate:,.0f} rows/s | - |",
            f"| compaction without the gate (stage, write, publish), median | {write_seconds:.1f} s, "
            f"{wap_rate:,.0f} rows/s | - |",
            f"| ratio to the baseline | {wap_rate / base_rate:.2f} | >= 0.80 |",
            f"| gate (GX audit), median | {statistics.median(gate):.1f} s | - |",
            f"| gate's share of the whole compaction | {share:.0%} | <= 25 % |",
        ]
        print("\n" + "\n".join(lines))
        spark.stop()
    finally:
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
