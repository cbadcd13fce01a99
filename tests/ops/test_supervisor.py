"""The supervisor with real drivers: a sessionizer whose state and watermark cross the job's health
limits. Its loop over a driver's lifecycle is tested on a fake backend in test_supervisor_loop.py."""

from __future__ import annotations

from typing import Any

import pytest

from ops.config import PlatformConfig
from ops.ledger import Ledger
from ops.supervisor import Supervisor, stop_all_jobs
from tests.support.drivers import caught_up, edit_job, wait_for, write_sessions_input
from tests.support.slack import SlackReceiver


def tight_limits(spec: dict[str, Any]) -> None:
    spec["operations"]["trigger"] = {"interval_seconds": 1, "max_files_per_trigger": 1}
    # Any RocksDB state is above 0.001 MB; the scenario's event times are in 2025.
    spec["operations"]["health"].update(max_state_memory_mb=0.001, max_watermark_lag_seconds=3600)


# Supervisor.for_platform launches real drivers through the local backend.
@pytest.mark.spark
def test_state_pressure_and_watermark_lag_of_a_running_driver_degrade_it_and_page(
    platform_conf: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver
) -> None:
    platform = platform_conf
    edit_job(platform, "sessionizer", tight_limits)
    for seed in range(2):
        write_sessions_input(platform, seed)
    supervisor = Supervisor.for_platform(platform)
    try:
        supervisor.reconcile("sessionizer")
        wait_for(lambda: caught_up(platform, "sessionizer", files=2), 240, "the sessionizer's batches")

        def pages() -> list[str]:
            return [message["text"] for message in slack_webhook.messages]

        # The heartbeat of the last batch can land a moment after its commit: until it does, a pass
        # sees batch 0, whose watermark is still the epoch, so only the state pressure holds.
        wait_for(
            lambda: supervisor.reconcile("sessionizer").state == "DEGRADED" and len(pages()) >= 2,
            30,
            "DEGRADED with two pages",
        )
        (run,) = ledger.runs("sessionizer")
        assert run.stopped_at is None, "a degraded job keeps running"
        texts = pages()
        assert any("state holds" in text and "limit 0.001 MB" in text for text in texts), texts
        assert any("behind the wall clock (limit 3600s)" in text for text in texts), texts
    finally:
        stop_all_jobs(platform)
