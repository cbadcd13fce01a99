"""Scaling on a real embedded standalone cluster (a master and two one-core workers on loopback):
the real supervisor launches real drivers in client mode, rescales them through SCALING, make
before break (a standby at the new scale takes over), and the sink is compared with a clean run
over the same input, row for row.

The router runs under a load written by the test, a landing file per tick: a base rate, a step to
6x until the autoscaler scales up, 3x while the rescale is carried out, and back. It starts at one
core reading two files per batch, falls behind under the step, is scaled up to two cores (and four
files per batch) from the backlog it builds, catches up, and after the load falls and the
scale-down delay passes is scaled back down. The sessionizer (RocksDB state)
is pinned from one core to two between its batches and keeps its state: its sink equals the batch
run's. `warden decisions` keeps every step, as a ledger row with its inputs.

The autoscaler's guards, whose outcomes follow from the input their tests write and not from the
cluster, run in local mode beside the other tests (tests/ops/test_scaling_guards.py).

A team's python job runs on the same cluster: its pandas UDF, from a module of the team's code
outside the repository, runs in the Python workers of executors in other processes, which import
it from the code's zip the driver added to its session.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ops.control.supervisor import Supervisor, stop_all_jobs
from ops.embedded.cluster import SparkCluster
from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from synthetic.generator import FileLoad, write_batch
from synthetic.scenarios import SCENARIOS
from tests.support.drivers import caught_up, edit_job, wait_for
from tests.support.platform import job_paths
from tests.support.scaling import (
    EVENTS_PER_FILE,
    assert_sink_is_a_clean_run,
    autoscaled_router,
    drive,
    rescales,
)
from tests.support.slack import SlackReceiver
from tests.support.team_jobs import TEAM_JOB, team_job_spec, write_team_code, write_team_job

# Each run starts a cluster and drivers on cores other runs share: far beyond the default 600 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture
def platform(cluster_platform: PlatformConfig) -> Iterator[PlatformConfig]:
    """The test's platform on the module's shared cluster (none of these runs stops a worker)."""
    yield cluster_platform
    stop_all_jobs(cluster_platform)


def test_the_router_scales_up_under_a_step_catches_up_and_scales_back_down(
    platform: PlatformConfig, ledger: Ledger, slack_webhook: SlackReceiver, spark: SparkSession
) -> None:
    edit_job(platform, "router", autoscaled_router)
    supervisor = Supervisor.for_platform(platform)
    load = FileLoad(platform.landing_root / "events", EVENTS_PER_FILE)
    ran_at: list[int | None] = []

    def running_at(cores: int) -> Callable[[], bool]:
        def check() -> bool:
            job, run = ledger.job("router"), ledger.current_run("router")
            ran_at.append(run.cores if run else None)
            return job is not None and job.state == "RUNNING" and run is not None and run.cores == cores

        return check

    # The job launches at its minimum, one core; then the base load, one file a tick.
    drive(supervisor, load, 0, running_at(1), 300, "the router running at 1 core")

    def batches(count: int) -> Callable[[], bool]:
        return lambda: (job := ledger.job("router")) is not None and (job.last_batch_id or 0) >= count

    # Eight batches: more than the 20 s a decision's window needs.
    drive(supervisor, load, 1, batches(8), 120, "a window of batches at the base load")
    assert rescales(ledger, "router") == []

    # 6x: six files a tick, two read per batch, and the backlog grows by a file a second. The
    # scale-up comes once the window holds only the step's batches (ten, about 44 s: until then
    # the base load's one-file batches fit as fixed cost), when the arrivals and the backlog
    # (about 45 files) to drain in the 30 s catch-up ask 1.4 times what one core does (134
    # against 96 rows/s in the run that set it). 8x built half as much backlog again for the two
    # cores to drain; at 4x the backlog alone had to ask, three times as late.
    step_at = time.monotonic()
    drive(
        supervisor,
        load,
        6,
        lambda: any(op.to_cores == 2 for op in rescales(ledger, "router")),
        450,
        "a scale-up",
    )
    decided_after = time.monotonic() - step_at
    up = rescales(ledger, "router")[0]
    [decision] = [d for d in ledger.decisions("router", limit=500, action="scale") if d.id == up.decision_id]
    assert (
        decision.inputs["autoscaler"]["recommended"] == 2
        and decision.inputs["autoscaler"]["backlog_rows"] > 0
    )
    assert (up.from_cores, up.to_cores, up.to_max_files) == (1, 2, 4)
    # 3x while the standby warms up: still more than one core reads (the backlog grows), so the
    # rescale goes on.
    drive(supervisor, load, 3, running_at(2), 300, "the router running at 2 cores")
    up = rescales(ledger, "router")[0]
    assert up.outcome is not None and up.restart_cost_seconds is not None and up.restart_cost_seconds > 0

    # The load falls back to the base: the backlog drains at 2 cores, and once the lower
    # recommendation has held for the delay, the job goes back to 1 core.
    drive(supervisor, load, 1, lambda: len(rescales(ledger, "router")) == 2, 600, "a scale-down")
    down = rescales(ledger, "router")[1]
    assert (down.from_cores, down.to_cores, down.to_max_files) == (2, 1, 2)
    [down_decision] = [
        d for d in ledger.decisions("router", limit=500, action="scale") if d.id == down.decision_id
    ]
    assert down_decision.inputs["autoscaler"]["backlog_rows"] == 0
    drive(supervisor, load, 0, running_at(1), 300, "the router back at 1 core")
    assert [n for n in ran_at if n is not None][-1] == 1

    # Make before break, both ways: each new scale's driver warmed up as a standby and took over.
    promoted = [
        s for s in ledger.standbys("router", limit=50) if (s.exit_reason or "").startswith("promoted")
    ]
    assert len(promoted) == 2, [s.exit_reason for s in ledger.standbys("router", limit=50)]
    assert all(
        op.outcome is not None and op.outcome.startswith("rescaled") for op in rescales(ledger, "router")
    )

    notices = [m["text"] for m in slack_webhook.messages if "rescaled" in m["text"]]
    assert (
        len(notices) == 2
        and "rescaled from 1 to 2 cores" in notices[0]
        and "rescaled from 2 to 1 cores" in notices[1]
    )
    print(
        f"scale-up decided {decided_after:.0f} s after the step; restart cost {up.restart_cost_seconds:.1f} s"
    )

    # No input lost or doubled by the two rescales: the sink is the batch run's, row for row.
    wait_for(lambda: caught_up(platform, "router", files=load.written), 300, "the router reading every file")
    stop_all_jobs(platform)
    assert_sink_is_a_clean_run(spark, platform, "router", platform.landing_root)


def test_the_sessionizer_scales_up_with_its_rocksdb_state_intact(
    platform: PlatformConfig, ledger: Ledger, spark: SparkSession
) -> None:
    def one_file_per_batch(spec: dict[str, Any]) -> None:
        spec["operations"]["trigger"] = {"interval_seconds": 2, "max_files_per_trigger": 1}
        spec["operations"]["resources"] = {"executor_memory": "512m", "shuffle_partitions": 4}
        spec["operations"]["savepoints"] = {"interval_minutes": None}

    edit_job(platform, "sessionizer", one_file_per_batch)
    spec = find_job("sessionizer", platform.conf_dir)
    scenario = SCENARIOS[spec.name]
    assert scenario.flush is not None
    written = scenario.write(platform.landing_root, 900, 3)
    batch_landing = platform.runtime_root / "batch-landing"
    shutil.copytree(platform.landing_root, batch_landing)
    supervisor = Supervisor.for_platform(platform)
    supervisor.scale("sessionizer", 1, "start small")
    commits = job_paths(platform, "sessionizer").checkpoint / "commits"

    def reconciled(condition: Callable[[], bool]) -> Callable[[], bool]:
        def check() -> bool:
            supervisor.reconcile("sessionizer")
            return condition()

        return check

    wait_for(
        reconciled(lambda: commits.is_dir() and any(commits.iterdir())), 300, "the first batch at 1 core"
    )
    # Sessions are open in the state store now; the rescale stops the driver between batches.
    supervisor.scale("sessionizer", 2, "more cores mid-stream")
    wait_for(
        reconciled(
            lambda: (
                (run := ledger.current_run("sessionizer")) is not None
                and run.cores == 2
                and ledger.operation("sessionizer") is None
            )
        ),
        300,
        "the sessionizer rescaled to 2 cores",
    )
    [rescale] = rescales(ledger, "sessionizer")
    assert (rescale.from_cores, rescale.to_cores) == (1, 2) and rescale.outcome is not None
    files_per_source = len(written) // len(spec.pipeline.inputs)
    assert ledger.runs("sessionizer")[1].exit_reason == "stopped: rescale"
    wait_for(
        reconciled(lambda: caught_up(platform, "sessionizer", files=files_per_source)), 300, "every file"
    )
    # The sessions still open (in the state the second driver restored) close on the flush.
    scenario.flush(platform.landing_root)
    wait_for(
        reconciled(lambda: caught_up(platform, "sessionizer", files=files_per_source + 1)), 300, "the flush"
    )
    stop_all_jobs(platform)
    assert_sink_is_a_clean_run(spark, platform, "sessionizer", batch_landing)


def test_a_teams_udf_runs_on_the_executors_from_its_code_zip(
    platform: PlatformConfig, running_cluster: SparkCluster, spark: SparkSession, tmp_path: Path
) -> None:
    code = write_team_code(tmp_path / "team-code")
    spec = team_job_spec(code)
    spec["operations"]["resources"] = {"cores": 2, "executor_memory": "512m"}
    write_team_job(platform, spec)
    for seed in (1, 2):
        write_batch(platform.landing_root / "events", 200, 0.02, seed)
    supervisor = Supervisor.for_platform(platform)

    wait_for(lambda: supervisor.reconcile(TEAM_JOB).state == "RUNNING", 300, "the team's job RUNNING")
    wait_for(lambda: caught_up(platform, TEAM_JOB, files=2), 300, "the team's files on the cluster")
    health = running_cluster.health()
    assert health is not None and health.apps == (f"streamwarden-{TEAM_JOB}",) and health.cores_used == 2
    stop_all_jobs(platform)

    # Each worker's executor fetched the code's zip into its directory (addPyFile) ...
    work = running_cluster.platform.runtime_root / "spark"
    zips = work.glob(f"worker-*/app-*/*/{code.name}-*.zip")
    assert {path.relative_to(work).parts[0] for path in zips} == {"worker-1", "worker-2"}
    # ... and sized every purchase as the team's rules say, as a local batch run does.
    assert_sink_is_a_clean_run(spark, platform, TEAM_JOB, platform.landing_root)
