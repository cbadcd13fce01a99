"""The event-sourced materialized view (`jobs.asset_locations`, `ops.views`): the shipped example's
real query over files arriving out of order, published by the driver's publisher into a real
PostgreSQL database, equals the system of record and the batch run; a full publish that agrees
changes nothing, one that corrects the view is absorbed."""

from __future__ import annotations

import os
import random

from pyspark.sql import SparkSession

from jobs.analysis import analyse
from jobs.batch import batch_rows
from ops import views
from ops.driver.view_publisher import ViewPublisher
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.assets import AssetFleet
from tests.support.asset_locations import JOB, install_asset_job, published_view
from tests.support.platform import job_paths
from tests.support.spark import run_available_now


def one_file_per_batch(spec: dict) -> None:
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}


def test_the_view_equals_the_system_of_record_and_absorbs_full_publishes_without_churn(
    spark: SparkSession, platform_conf: PlatformConfig, postgres_database: str
) -> None:
    platform = install_asset_job(platform_conf, postgres_database, one_file_per_batch)
    spec = find_job(JOB, platform.conf_dir)
    publisher = ViewPublisher(
        JOB, spec.pipeline.view, job_paths(platform, JOB).sink_log, views.database_url(platform)
    )
    fleet = AssetFleet(platform.landing_root)
    written = [fleet.place(assets=20, per_asset=3, seed=0)]
    written += [fleet.move(moves=8, seed=seed) for seed in range(1, 7)]
    # The files arrive in another order than their events happened: the view must not care.
    for path, age in zip(written, random.Random(7).sample(range(100, 200), len(written)), strict=True):
        os.utime(path, (path.stat().st_mtime - age, path.stat().st_mtime - age))

    assert analyse(spark, platform, spec) == {}
    run_available_now(spark, platform, spec)
    assert publisher.reconcile() == len(written)
    assert published_view(platform) == fleet.view()
    batch = batch_rows(spark, platform, spec, platform.landing_root).where("dead_letter_reason IS NULL")
    assert {row.asset_id: row.locations for row in batch.collect()} == fleet.view()

    with views.connected(views.database_url(platform)) as connection:
        changes_before = connection.execute("SELECT count(*) FROM view_changes").fetchone()
    fleet.full_publish()
    run_available_now(spark, platform, spec)
    assert publisher.reconcile() == 1
    with views.connected(views.database_url(platform)) as connection:
        assert connection.execute("SELECT count(*) FROM view_changes").fetchone() == changes_before
        [(keys,)] = connection.execute("SELECT keys FROM view_batches ORDER BY batch DESC LIMIT 1").fetchall()
    assert keys == 0, "a full publish that agrees with the view changed it"

    # The system of record corrects two assets the changes had wrong: one moved, one emptied.
    fleet.full_publish({"asset-003": {"pop-900"}, "asset-004": set()})
    run_available_now(spark, platform, spec)
    assert publisher.reconcile() == 1
    view = published_view(platform)
    assert view == fleet.view() and view["asset-003"] == ["pop-900"] and "asset-004" not in view
    publisher.close()
