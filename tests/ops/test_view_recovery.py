"""A published view through real drivers (`python -m jobs.runner`): killed with SIGKILL mid-stream,
fed a full publish, and restated from a savepoint after a wrong version ran, the view in
PostgreSQL equals the clean run's, key for key; a reader polling it while the killed drivers ran
never saw half a batch (every file moves locations between assets, so a whole batch keeps their
number)."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from typing import Any
from unittest.mock import ANY

import pytest

from ops import views
from ops.cli import main
from ops.clock import utcnow
from ops.console.board import Console
from ops.control.supervisor import Supervisor
from ops.driver.checkpoint import log_entries
from ops.ledger.store import Ledger
from ops.recovery.rewind import rewind_job
from ops.savepoints.store import take_savepoint
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.assets import AssetFleet
from tests.support.asset_locations import JOB, buggy_code, install_asset_job, published_view
from tests.support.drivers import Driver, caught_up, edit_job, wait_for
from tests.support.platform import job_paths

ASSETS, PER_ASSET = 12, 3


def committed_batches(platform: PlatformConfig) -> int:
    return len(log_entries(job_paths(platform, JOB).sink_log))


def stop(driver: Driver) -> None:
    driver.process.send_signal(signal.SIGTERM)
    assert driver.wait_exit() == 0, driver.log()


def wait_for_view(
    platform: PlatformConfig, driver: Driver, expected: dict[str, list[str]], files: int
) -> None:
    driver.wait_heartbeat(lambda _: caught_up(platform, JOB, files), timeout=300)
    wait_for(lambda: published_view(platform) == expected, 60, f"the view to equal {expected}")


class Reader(threading.Thread):
    """Polls the number of locations the view holds, in one statement a poll."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url, self.totals, self.done = url, set[int](), threading.Event()

    def run(self) -> None:
        with views.connected(self.url) as connection:
            while not self.done.wait(0.05):
                [(total,)] = connection.execute(
                    "SELECT coalesce(sum(jsonb_array_length(value)), 0) FROM view_current WHERE job = %s",
                    (JOB,),
                ).fetchall()
                self.totals.add(int(total))


@pytest.mark.slow
def test_the_view_after_kill_loops_a_full_publish_and_a_restate_equals_the_clean_runs(
    platform_with_s3: PlatformConfig,
    ledger: Ledger,
    postgres_database: str,
    start_driver: Callable[..., Driver],
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    platform = install_asset_job(platform_with_s3, postgres_database)
    fleet = AssetFleet(platform.landing_root)
    fleet.place(ASSETS, PER_ASSET, seed=0)
    for seed in range(1, 11):
        fleet.move(moves=6, seed=seed)
    reader = Reader(views.database_url(platform))
    reader.start()
    try:
        # Two drivers killed mid-stream (SIGKILL, after at least a batch each), a third catches up.
        for run, batches in (("kill-1", 1), ("kill-2", 3)):
            driver = start_driver(run, JOB)
            driver.wait_heartbeat(lambda _, at_least=batches: committed_batches(platform) >= at_least)
            driver.kill()
        driver = start_driver("survivor", JOB)
        wait_for_view(platform, driver, fleet.view(), files=11)
    finally:
        reader.done.set()
        reader.join()
    assert reader.totals <= {0, ASSETS * PER_ASSET} and ASSETS * PER_ASSET in reader.totals

    # The full publish corrects one asset and agrees on the others: one key changes.
    fleet.full_publish({"asset-001": {"pop-900"}})
    wait_for(lambda: published_view(platform) == fleet.view(), 120, "the full publish")
    with views.connected(views.database_url(platform)) as connection:
        [(keys,)] = connection.execute(
            "SELECT keys FROM view_batches WHERE job = %s ORDER BY batch DESC LIMIT 1", (JOB,)
        ).fetchall()
    assert keys == 1
    stop(driver)
    savepoint = take_savepoint(platform, ledger, find_job(JOB, platform.conf_dir))

    right_spec = (platform.conf_dir / "jobs" / f"{JOB}.yaml").read_text()

    def wrong_version(spec: dict[str, Any]) -> None:
        spec["pipeline"].update(code=str(buggy_code(tmp_path / "buggy")), entrypoint="buggy_assets:build")

    edit_job(platform, JOB, wrong_version)
    for seed in range(11, 14):
        fleet.move(moves=6, seed=seed)
    driver = start_driver("wrong", JOB)
    driver.wait_heartbeat(lambda _: caught_up(platform, JOB, files=14), timeout=300)
    wait_for(lambda: published_view(platform) != fleet.view(), 60, "the wrong version's view")
    stop(driver)

    (platform.conf_dir / "jobs" / f"{JOB}.yaml").write_text(right_spec)
    rewind_job(Supervisor.for_platform(platform), JOB, reason="removals dropped", savepoint_id=savepoint.id)
    driver = start_driver("restated", JOB)
    wait_for_view(platform, driver, fleet.view(), files=14)
    assert "view reverted to the sink's newest batch" in driver.log()
    stop(driver)

    # Its readers: `warden view` and the job page.
    key, locations = next(iter(fleet.view().items()))
    assert main(["view", JOB, "--key", key, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"key": key, "value": locations, "batch": ANY}]
    assert main(["view", JOB, "--key", "no-such-asset"]) == 1
    page = Console(platform, ledger).job_page(JOB, utcnow())
    assert page is not None and page.view is not None and page.view.summary is not None
    assert page.view.summary.keys == len(fleet.view())
