"""A Hive session on the platform's metastore keeps its files under the platform's runtime root:
Hive's per-session resource directory used to stay in the system's temporary directory, one per
session, since Spark never closes the session."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ops.spec.platform import PlatformConfig
from ops.warehouse.metastore import HIVE_RESOURCES_DIR
from tests.support.warehouse import query_table


def test_a_hive_session_keeps_its_resource_directory_under_the_runtime_root(
    warehouse_platform: PlatformConfig,
) -> None:
    assert {"namespace": "default"} in query_table(warehouse_platform, "SHOW DATABASES")

    kept = list((warehouse_platform.runtime_root / HIVE_RESOURCES_DIR).iterdir())
    assert kept, "the session made no resource directory under the runtime root"
    assert all(path.name.endswith("_resources") for path in kept), kept
    assert not [path.name for path in kept if (Path(tempfile.gettempdir()) / path.name).exists()]
