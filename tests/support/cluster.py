"""The embedded Spark standalone cluster for tests: a master and two one-core workers on free
loopback ports, stopped at the end.

`cluster` is a test's own, not started: for a test about starting or stopping the cluster itself.
`cluster_platform` points the test's platform at a cluster started once per module
(`running_cluster`) and shared by tests that only run applications on it: none may stop a worker
or the master. Each such test starts on an idle cluster (every worker alive, every core free).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from ops.embedded.cluster import SparkCluster
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.platform import write_conf
from tests.support.ports import free_test_port

# How long a test waits for the applications of the one before it to leave the shared cluster.
IDLE_TIMEOUT_SECONDS = 120.0


def on_embedded_cluster(platform: PlatformConfig, memory_per_worker: str = "1g") -> PlatformConfig:
    """The throwaway platform with `spark.master: embedded` on free ports, reloaded."""
    path = platform.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document["spark"] = {
        "master": "embedded",
        "ui_enabled": False,
        "cluster": {
            "workers": 2,
            "cores_per_worker": 1,
            "memory_per_worker": memory_per_worker,
            "master_port": free_test_port(),
            "master_ui_port": free_test_port(),
            # Two consecutive free ports each: worker i takes base + i.
            "worker_port_base": _free_pair(),
            "worker_ui_port_base": _free_pair(),
        },
    }
    path.write_text(yaml.safe_dump(document))
    return load_platform(platform.conf_dir)


def _free_pair() -> int:
    first, second = free_test_port(), free_test_port()
    while second != first + 1:
        first, second = second, free_test_port()
    return first


@pytest.fixture
def cluster(platform_conf: PlatformConfig) -> Iterator[SparkCluster]:
    """The throwaway platform's embedded cluster (not started: `cluster.start()`), stopped at the end."""
    platform = on_embedded_cluster(platform_conf)
    spark_cluster = SparkCluster.for_platform(platform)
    assert spark_cluster is not None
    yield spark_cluster
    spark_cluster.stop()


@pytest.fixture(scope="module")
def running_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A started cluster with a platform dir of its own (its logs and work dirs), shared by the
    module's tests through `cluster_platform`: one start (minutes on a loaded machine) per module
    rather than per test; stopped after the module's last test, not held for the rest of the run."""
    root = tmp_path_factory.mktemp("running-cluster")
    write_conf(root / "conf", root / "runtime")
    spark_cluster = SparkCluster.for_platform(on_embedded_cluster(load_platform(root / "conf")))
    assert spark_cluster is not None
    try:
        spark_cluster.start(timeout=180)
        yield spark_cluster
    finally:
        spark_cluster.stop()


@pytest.fixture
def cluster_platform(platform_conf: PlatformConfig, running_cluster: SparkCluster) -> PlatformConfig:
    """The throwaway platform with `spark.master: embedded` on the module's running cluster, reloaded
    once the cluster is idle: the applications of an earlier test gone, every core free."""
    path = platform_conf.conf_dir / "platform.yaml"
    document = yaml.safe_load(path.read_text())
    document["spark"] = {
        "master": "embedded",
        "ui_enabled": False,
        "cluster": running_cluster.config.model_dump(mode="json"),
    }
    path.write_text(yaml.safe_dump(document))
    _wait_until_idle(running_cluster)
    return load_platform(platform_conf.conf_dir)


def _wait_until_idle(spark_cluster: SparkCluster) -> None:
    """Return once the master is ALIVE with every worker, no application and no core in use."""
    deadline = time.monotonic() + IDLE_TIMEOUT_SECONDS
    while True:
        health = spark_cluster.health()
        if (
            health is not None
            and health.status == "ALIVE"
            and health.workers_alive == spark_cluster.config.workers
            and health.apps == ()
            and health.cores_used == 0
        ):
            return
        assert time.monotonic() < deadline, (
            f"the shared cluster is not idle after {IDLE_TIMEOUT_SECONDS:g}s: {health}"
        )
        time.sleep(1.0)
