"""Session settings `jobs.runtime.build_session` derives from a job's spec (no Spark needed)."""

from __future__ import annotations

import pytest

from ops.driver.session import PARALLEL_LISTING_THRESHOLD, listing_conf
from ops.spec.job import JobSpec, find_job


def with_max_files(spec: JobSpec, max_files: int | None) -> JobSpec:
    trigger = spec.operations.trigger.model_copy(update={"max_files_per_trigger": max_files})
    operations = spec.operations.model_copy(update={"trigger": trigger})
    return spec.model_copy(update={"operations": operations})


def test_a_batch_of_more_files_than_spark_lists_in_the_driver_is_still_listed_in_the_driver() -> None:
    router = find_job("router")
    assert router.operations.trigger.max_files_per_trigger == 50
    assert listing_conf(router) == {"spark.sql.sources.parallelPartitionDiscovery.threshold": "50"}


@pytest.mark.parametrize("max_files", [None, 1, PARALLEL_LISTING_THRESHOLD])
def test_spark_default_listing_stays_when_batches_are_small_or_unbounded(max_files: int | None) -> None:
    assert listing_conf(with_max_files(find_job("router"), max_files)) == {}
