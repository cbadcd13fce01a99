"""The nightly compaction DAGs under Airflow's dag.test(): SparkSubmitOperator runs the real
compaction of the router's and the sessionizer's closed partitions, each sink written in many
small batches; the table, read with SQL by another Spark process, holds every committed row."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from pyspark.sql import SparkSession

from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from ops.warehouse.compaction import warehouse_table
from ops.warehouse.rewrite import read_partition
from ops.warehouse.sinklog import NULL_PARTITION, sink_partitions
from synthetic.scenarios import router_scenario, sessionizer_scenario
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now
from tests.support.warehouse import driver_available_now, one_file_per_batch, query_table

# Several Spark processes (driver, compactions, readers), each a cold start with the cores shared.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
DAGS = Path(__file__).resolve().parents[2] / "dags"
NIGHT = datetime(2026, 11, 20, 2, tzinfo=UTC)


def committed_counts(spark: SparkSession, platform: PlatformConfig, job: str) -> Counter[str]:
    """Rows per closed partition key, as the sink log lists them committed."""
    spec = find_job(job, platform.conf_dir)
    sink = platform.lake_root / spec.pipeline.sink.path
    return Counter(
        {
            partition.key: read_partition(spark, sink, list(partition.files)).count()
            for partition in sink_partitions(sink, warehouse_table(platform, spec))
            if NULL_PARTITION not in partition.key
        }
    )


def test_nightly_dags_compact_the_router_and_the_sessionizer(
    spark: SparkSession, warehouse_platform: PlatformConfig
) -> None:
    platform = warehouse_platform
    for job in ("router", "sessionizer"):
        edit_job(platform, job, one_file_per_batch)
    for seed in (1, 2):
        router_scenario(platform.landing_root, 240, seed)
    sessionizer_scenario(platform.landing_root, 240, 1)
    driver_available_now(platform, "router")
    run_available_now(spark, platform, find_job("sessionizer", platform.conf_dir))

    bag = DagBag(dag_folder=str(DAGS))
    ledger = Ledger.open(platform.resolved_ledger_url)
    for job in ("router", "sessionizer"):
        dag_run = bag.get_dag(f"warden_compact_{job}").test(logical_date=NIGHT)
        assert dag_run.state == "success"
        expected = committed_counts(spark, platform, job)
        versions = {version.partition: version for version in ledger.partition_versions(job)}
        assert set(versions) == set(expected)
        for key, version in versions.items():
            assert (version.status, version.output_rows) == ("published", expected[key])
            assert version.input_files is not None and version.output_files == 1 <= version.input_files
        # Files per partition drop to the target (one file here): many small batches became one.
        assert sum(version.input_files or 0 for version in versions.values()) > len(versions)
        columns = ", ".join(warehouse_table(platform, find_job(job, platform.conf_dir)).partition_columns)
        counted = query_table(
            platform, f"SELECT {columns}, count(*) AS n FROM warehouse.{job} GROUP BY {columns}"
        )
        assert (
            Counter({"/".join(f"{k}={v}" for k, v in row.items() if k != "n"): row["n"] for row in counted})
            == expected
        )
