"""The autoscaler's guards with real drivers in local mode (`local[N]`, N the job's cores): the real
supervisor rescales them through SCALING, and the sink is compared with a clean run, row for row.
Each run is built so that its outcome follows from the input the test writes, not from how fast
the loaded machine happens to be, nor from where the executors run (the standalone cluster's
rescales: tests/ops/test_scaling_cluster.py):

- no scale-down while a backlog drains: the router starts at two cores over a backlog it reads a
  file per batch, with no further input and an hour's catch-up, so the formula asks for one core
  from the first window on; every such recommendation is refused while files are unread, and the
  scale-down comes only once every file is read;
- ineffective scaling: the router is scaled up from one core under a load of 100-event files, and
  from then on the input is one-event files, so a batch's rows fall a hundredfold while its time
  (per-batch overhead) does not: the true rate after the scale-up is far below the one before,
  and the next scale-up, which the growing backlog of small files asks for, is refused and recorded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.driver.checkpoint import log_entries
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig
from synthetic.generator import FileLoad
from tests.support.drivers import caught_up, edit_job, files_read, wait_for
from tests.support.scaling import (
    EVENTS_PER_FILE,
    TICK_SECONDS,
    assert_sink_is_a_clean_run,
    autoscaled_router,
    drive,
    recommendations,
    rescales,
)

# Drivers restarted by rescales on cores other tests share: far beyond the default 600 s. Mostly
# waiting out autoscaling windows: in the group `waiting` (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("waiting")]


@pytest.fixture
def platform(platform_conf: PlatformConfig) -> Iterator[PlatformConfig]:
    """The throwaway platform, drivers in local mode; every job stopped at the end."""
    yield platform_conf
    stop_all_jobs(platform_conf)


def a_file_per_batch(spec: dict[str, Any], **autoscaling: int) -> None:
    """The autoscaled router reading one file a batch, with `autoscaling` settings of its own."""
    autoscaled_router(spec)
    spec["operations"]["trigger"]["max_files_per_trigger"] = 1
    spec["operations"]["autoscaling"].update(autoscaling)
    spec["operations"]["health"] = {**spec["operations"].get("health", {}), "stuck_grace_seconds": 120}


def committed_at(platform: PlatformConfig, job: str, files: int) -> float:
    """When (epoch seconds) the first batch that had read `files` input files committed."""
    for batch, [commit, *_] in sorted(log_entries(platform.checkpoint_root / job / "commits").items()):
        if files_read(platform, job, batch) >= files:
            return commit.stat().st_mtime
    raise AssertionError(f"no committed batch of {job} read {files} files")


def test_a_draining_backlog_blocks_the_scale_down_until_every_file_is_read(
    platform: PlatformConfig, ledger: Ledger, spark: SparkSession
) -> None:
    def over_a_backlog(spec: dict[str, Any]) -> None:
        # An hour to catch up in: the backlog alone never asks for the second core, and with no
        # input arriving the formula asks for one from the first window on.
        a_file_per_batch(spec, catch_up_seconds=3600, scale_down_delay_seconds=10)
        spec["operations"]["resources"]["cores"] = 2

    edit_job(platform, "router", over_a_backlog)
    load = FileLoad(platform.landing_root / "events", EVENTS_PER_FILE)
    # A minute's reading at a file a tick: the windows after the first full one (20 s of metrics)
    # each recommend one core while files wait.
    load.write(16)
    supervisor = Supervisor.for_platform(platform)

    drive(supervisor, load, 0, lambda: bool(rescales(ledger, "router")), 1200, "a scale-down")
    [down] = rescales(ledger, "router")
    assert (down.from_cores, down.to_cores) == (2, 1)
    [decision] = [
        d for d in ledger.decisions("router", limit=1000, action="scale") if d.id == down.decision_id
    ]
    # The scale-down was decided once the batch that read the last file had committed, with no
    # backlog in its window.
    assert decision.inputs["autoscaler"]["backlog_rows"] == 0
    assert committed_at(platform, "router", load.written) <= decision.at.timestamp()
    # Before it, the same recommendation was refused while the backlog drained, and said why.
    draining = recommendations(ledger, "router", "backlog")
    assert draining, "no recommendation was refused for the draining backlog"
    assert all(
        row.at < decision.at
        and row.inputs["autoscaler"]["cores"] == 2
        and row.inputs["autoscaler"]["recommended"] == 1
        and row.inputs["autoscaler"]["backlog_rows"] > 0
        for row in draining
    )
    print(draining[0].reason)

    def back_at_one_core() -> bool:
        run = ledger.current_run("router")
        return run is not None and run.cores == 1 and ledger.operation("router") is None

    drive(supervisor, load, 0, back_at_one_core, 300, "the router back at 1 core")
    stop_all_jobs(platform)
    assert_sink_is_a_clean_run(spark, platform, "router", platform.landing_root)


def test_an_ineffective_scale_up_blocks_the_next_one(
    platform: PlatformConfig, ledger: Ledger, spark: SparkSession
) -> None:
    def one_file_per_batch(spec: dict[str, Any]) -> None:
        a_file_per_batch(
            spec, max_cores=4, catch_up_seconds=5, stabilization_seconds=30, scale_down_delay_seconds=600
        )

    edit_job(platform, "router", one_file_per_batch)
    supervisor = Supervisor.for_platform(platform)
    large = FileLoad(platform.landing_root / "events", 100, seed=1)
    small = FileLoad(platform.landing_root / "events", 1, seed=2)

    def running() -> bool:
        return (job := ledger.job("router")) is not None and job.state == "RUNNING"

    drive(supervisor, large, 0, running, 300, "the router running at 1 core")
    # Two 100-event files a tick, one read a batch: the backlog grows until a scale-up.
    drive(supervisor, large, 2, lambda: bool(rescales(ledger, "router")), 600, "a scale-up")
    [up] = rescales(ledger, "router")
    assert (up.from_cores, up.to_cores, up.to_max_files) == (1, 2, 2)
    assert up.true_rate_before is not None and up.true_rate_before > 0

    # The rescale goes on under the same load: before the stop its decision is checked against the
    # newest window, which still needs it (make before break), and the standby takes over.
    def at_two_cores() -> bool:
        run = ledger.current_run("router")
        return running() and run is not None and run.cores == 2

    drive(supervisor, large, 2, at_two_cores, 600, "the router running at 2 cores")
    [up] = rescales(ledger, "router")
    assert up.outcome is not None and up.outcome.startswith("rescaled"), up.outcome

    # From now on one-event files. Once the large files still waiting are read, the 2-core driver's
    # windows hold small files only.
    deadline = time.monotonic() + 600
    while files_read(platform, "router") < large.written:
        assert time.monotonic() < deadline, "the old driver did not read the large files within 600s"
        small.write(1)
        time.sleep(TICK_SECONDS)
    # Four a tick, two read a batch: the backlog grows, and the formula asks for more cores.
    drive(
        supervisor,
        small,
        4,
        lambda: bool(recommendations(ledger, "router", "ineffective")),
        900,
        "a scale-up refused as ineffective",
    )
    [refused, *_] = recommendations(ledger, "router", "ineffective")
    autoscaler = refused.inputs["autoscaler"]
    assert autoscaler["cores"] == 2 and autoscaler["recommended"] > 2
    assert autoscaler["true_rate"] < up.true_rate_before
    assert len(rescales(ledger, "router")) == 1, "the refused scale-up was not made"
    assert ledger.current_run("router").cores == 2  # type: ignore[union-attr]
    print(refused.reason)

    wait_for(lambda: caught_up(platform, "router", files=large.written + small.written), 600, "every file")
    stop_all_jobs(platform)
    assert_sink_is_a_clean_run(spark, platform, "router", platform.landing_root)
