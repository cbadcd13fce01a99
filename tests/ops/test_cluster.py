"""The embedded Spark standalone cluster: a real master and two workers on loopback, a real
streaming driver on it in client mode, sized by its job's cores."""

from __future__ import annotations

import socket
from collections.abc import Callable

import psutil
import pyarrow.parquet as pq
import pytest

from ops.embedded import platform as embedded
from ops.embedded.cluster import SparkCluster
from ops.exceptions import ServiceError
from synthetic.generator import write_batch
from tests.support.drivers import Driver, caught_up, edit_job, fast_trigger, wait_for
from tests.support.sockets import listening_sockets, process_trees

pytestmark = pytest.mark.slow


def command_line(pid: int) -> str:
    """A process's command line; empty once it has exited (the trees hold short-lived children,
    Spark's Python workers among them, that can end between the listing and this look)."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.NoSuchProcess:
        return ""


def test_a_streaming_driver_runs_on_the_embedded_cluster_with_its_cores_and_only_on_loopback(
    cluster: SparkCluster, start_driver: Callable[..., Driver]
) -> None:
    platform = cluster.platform
    cluster.start(timeout=180)
    health = cluster.health()
    assert health is not None
    assert (health.status, health.workers_alive, health.cores, health.cores_used) == ("ALIVE", 2, 2, 0)
    assert {row.name: row.running for row in embedded.status(platform)}.items() >= {
        "spark-master": True,
        "spark-worker-1": True,
        "spark-worker-2": True,
    }.items()

    def two_cores(spec: dict) -> None:
        fast_trigger(spec)
        spec["operations"]["resources"] = {"cores": 2, "executor_memory": "512m"}

    edit_job(platform, "router", two_cores)
    landing = platform.landing_root / "events"
    landing.mkdir(parents=True, exist_ok=True)
    batches = [write_batch(landing, 200, 0.05, seed=seed) for seed in (1, 2)]
    driver = start_driver("run-cluster", job="router")
    wait_for(lambda: caught_up(platform, "router", files=2), 300, "the router's batches on the cluster")

    health = cluster.health()
    assert health is not None
    assert health.apps == ("streamwarden-router",)
    # spark.cores.max = the job's cores, one per executor: both workers run one.
    assert health.cores_used == 2
    workers = [process.pid() for process in cluster.processes()]
    trees = process_trees([driver.process.pid, *[pid for pid in workers if pid is not None]])
    sockets = listening_sockets(trees)
    report = "\n".join(s.line() for s in sockets)
    executors = [pid for pid in trees if "CoarseGrainedExecutorBackend" in command_line(pid)]
    assert len(executors) == 2, report
    assert {s.pid for s in sockets} >= set(executors), report
    # Master RPC + UI, two workers' RPC + UI, the driver's RPC and block manager at least.
    assert {cluster.config.master_port, cluster.config.master_ui_port} <= {s.port for s in sockets}, report
    assert [s.line() for s in sockets if not s.loopback] == [], report

    # What the executors wrote: the purchases route holds exactly the paid purchases.
    purchases = (
        pq.read_table(platform.lake_root / "router" / "route=purchases").column("event_id").to_pylist()
    )
    paid = [
        e["event_id"] for b in batches for e in b.events if e["event_type"] == "purchase" and e["amount"] > 0
    ]
    assert sorted(purchases) == sorted(paid) and paid

    embedded.down(platform, echo=lambda line: None)
    assert not any(process.is_running() for process in cluster.processes())


def test_a_worker_whose_port_is_taken_is_reported_with_its_log(cluster: SparkCluster) -> None:
    # Another process holds the first worker's port: Spark must not move to the next port.
    taken = r"spark-worker-1 exited; last lines of .*spark-worker-1\.log"
    with (
        socket.create_server(("127.0.0.1", cluster.config.worker_port_base)),
        pytest.raises(ServiceError, match=taken),
    ):
        cluster.start(timeout=120)
    assert "BindException" in (cluster.platform.runtime_root / "logs" / "spark-worker-1.log").read_text()
