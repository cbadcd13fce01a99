"""Savepoints push their figures to a real Pushgateway (Debian's binary on loopback) when
`monitoring.pushgateway_url` is set; a failure pushes its time and keeps the last success; a
Pushgateway that is down fails nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ops.control.supervisor import Supervisor
from ops.exceptions import SavepointError
from ops.pushgateway import (
    LAST_DURATION,
    LAST_FAILURE,
    LAST_SUCCESS,
    SAVEPOINT_BATCH,
    SAVEPOINT_INTERVAL,
    SAVEPOINT_TOTAL_BYTES,
    SAVEPOINT_UPLOADED_BYTES,
    BatchTask,
    push_task_outcome,
)
from ops.spec.job import find_job
from ops.spec.platform import MonitoringConfig, PlatformConfig
from tests.monitoring.servers import pushed, pushgateway
from tests.ops.test_savepoints import write_checkpoint_batch
from tests.support.ports import free_test_port
from tests.support.s3 import S3Server


def with_gateway(platform: PlatformConfig, url: str) -> PlatformConfig:
    return platform.model_copy(update={"monitoring": MonitoringConfig(pushgateway_url=url)})


@pytest.mark.prometheus
def test_a_savepoint_pushes_its_figures_and_a_failure_keeps_the_last_success(
    platform_with_s3: PlatformConfig, s3_server: S3Server, tmp_path: Path
) -> None:
    interval_minutes = find_job("router", platform_with_s3.conf_dir).operations.savepoints.interval_minutes
    assert interval_minutes is not None
    write_checkpoint_batch(platform_with_s3, "router", 0)
    write_checkpoint_batch(platform_with_s3, "router", 1)
    with pushgateway(tmp_path) as gateway:
        supervisor = Supervisor.for_platform(with_gateway(platform_with_s3, gateway.url))
        before = time.time()
        savepoint = supervisor.savepoint("router", "pushed").savepoint
        figures = pushed(gateway, "router", BatchTask.SAVEPOINT)
        assert figures.keys() == {
            LAST_SUCCESS,
            LAST_DURATION,
            SAVEPOINT_BATCH,
            SAVEPOINT_TOTAL_BYTES,
            SAVEPOINT_UPLOADED_BYTES,
            SAVEPOINT_INTERVAL,
        }
        assert before <= figures[LAST_SUCCESS] <= time.time()
        assert figures[SAVEPOINT_BATCH] == savepoint.batch_id == 1
        assert figures[SAVEPOINT_TOTAL_BYTES] == savepoint.total_bytes > 0
        assert figures[SAVEPOINT_UPLOADED_BYTES] == savepoint.uploaded_bytes
        assert figures[SAVEPOINT_INTERVAL] == interval_minutes * 60
        assert 0 < figures[LAST_DURATION] < time.time() - before + 1

        with s3_server.outage(), pytest.raises(SavepointError):
            supervisor.savepoint("router", "S3 is down")
        after_failure = pushed(gateway, "router", BatchTask.SAVEPOINT)
        assert after_failure[LAST_FAILURE] > after_failure[LAST_SUCCESS]
        assert {name: after_failure[name] for name in figures} == figures, "the last success stays"


def test_a_pushgateway_that_is_down_fails_no_savepoint(platform_with_s3: PlatformConfig) -> None:
    write_checkpoint_batch(platform_with_s3, "router", 0)
    platform = with_gateway(platform_with_s3, f"http://127.0.0.1:{free_test_port()}")
    outcome = Supervisor.for_platform(platform).savepoint("router", "nobody listens")
    assert outcome.savepoint.batch_id == 0
    assert not push_task_outcome(platform.monitoring, BatchTask.COMPACTION, "router", succeeded=False)
    assert not push_task_outcome(MonitoringConfig(), BatchTask.COMPACTION, "router", succeeded=False)


def test_only_listed_batch_task_metrics_are_pushed() -> None:
    with pytest.raises(ValueError, match="streamwarden_compaction_rows"):
        push_task_outcome(
            MonitoringConfig(pushgateway_url="http://127.0.0.1:1"),
            BatchTask.COMPACTION,
            "router",
            succeeded=True,
            figures={"streamwarden_compaction_rows": 3.0},
        )
