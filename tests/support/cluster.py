"""The embedded Spark standalone cluster for tests: a master and two one-core workers on free
loopback ports, stopped at the end (`cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from ops.embedded.cluster import SparkCluster
from ops.spec.platform import PlatformConfig, load_platform
from tests.support.ports import free_test_port


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
