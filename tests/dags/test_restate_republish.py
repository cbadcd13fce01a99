"""The `warden_restate` DAG's `republish` task under Airflow's dag.test(): after a restatement,
the Spark provider's SparkSubmitOperator runs the compaction of exactly the published warehouse
partitions whose committed files changed, as the restatement's versions, and the `republish`
decision row names each with its rows before and after."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession

from ops.ledger.store import Ledger
from ops.recovery.restate import REPUBLISH_ACTION
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from ops.warehouse.compaction import warehouse_table
from ops.warehouse.sinklog import NULL_PARTITION, sink_partitions
from synthetic.scenarios import router_scenario
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now
from tests.support.warehouse import append_to_sink_log, compact_job, one_file_per_batch

# A driver, a compaction and a spark-submit: Spark processes of their own, each a cold start.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
DAGS = Path(__file__).resolve().parents[2] / "dags"
NIGHT = datetime(2026, 11, 20, 2, tzinfo=UTC)


def test_the_republish_task_submits_the_compaction_of_the_partitions_that_changed(
    spark: SparkSession, warehouse_platform: PlatformConfig
) -> None:
    platform = warehouse_platform
    edit_job(platform, "router", one_file_per_batch)
    router_scenario(platform.landing_root, 120, 1)
    spec = find_job("router", platform.conf_dir)
    run_available_now(spark, platform, spec)
    compact_job(platform, "router", "--now", NIGHT.isoformat())
    ledger = Ledger.open(platform.resolved_ledger_url)
    sink = platform.lake_root / spec.pipeline.sink.path
    partitions = [
        p for p in sink_partitions(sink, warehouse_table(platform, spec)) if NULL_PARTITION not in p.key
    ]
    assert all(ledger.partition_versions("router", p.key)[0].status == "published" for p in partitions)

    # What a replayed batch leaves: new committed rows in one published partition, none elsewhere.
    changed = next(p for p in partitions if "route=dead_letter" not in p.key)
    rows = pq.read_table(changed.files[0])
    late = rows.set_column(
        rows.schema.get_field_index("event_id"),
        "event_id",
        pc.binary_join_element_wise(rows["event_id"], "-replayed", ""),
    )
    late_file = changed.files[0].with_name("part-99999-replayed.c000.snappy.parquet")
    # INT96 timestamps, as Spark writes them (pyarrow's default, nanoseconds, Spark cannot read).
    pq.write_table(late, late_file, use_deprecated_int96_timestamps=True)
    append_to_sink_log(sink, late_file)
    rows_before = ledger.partition_versions("router", changed.key)[0].output_rows
    assert rows_before is not None

    restate = DagBag(dag_folder=str(DAGS)).get_dag("warden_restate")
    republish = restate.partial_subset(task_ids="republish", include_upstream=False)
    form = {"job": "router", "reason": "replayed hour"}
    # A dry run restated nothing, so its republish submits nothing, changed partitions or not.
    assert republish.test(run_conf={**form, "dry_run": True}).state == "success"
    assert not ledger.decisions("router", action=REPUBLISH_ACTION)
    assert republish.test(run_conf={**form, "dry_run": False}).state == "success"

    republished = [v for v in ledger.partition_versions("router") if v.source == "restatement"]
    assert [(v.partition, v.version, v.status) for v in republished] == [(changed.key, 2, "published")]
    assert (republished[0].rows_before, republished[0].output_rows) == (
        rows_before,
        rows_before + late.num_rows,
    )
    decision = ledger.decisions("router", action=REPUBLISH_ACTION)[0]
    assert decision.outcome == (
        f"republished 1 partitions of warehouse.router: {changed.key} v2 published, "
        f"rows {rows_before:,} -> {rows_before + late.num_rows:,}"
    )
    assert decision.reason.startswith("replayed hour (via ")
