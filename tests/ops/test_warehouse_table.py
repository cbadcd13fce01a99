"""The warehouse table's bookkeeping on a real ledger: partition keys, and which versions'
files retention deletes (never the one a partition shows, never one inside the period)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ops.exceptions import WarehouseError
from ops.ledger.store import Ledger
from ops.spec.platform import PlatformConfig
from ops.warehouse.table import WarehouseTable, expire_versions

COLUMNS = ("route", "event_date", "event_hour")
KEY = "route=a/event_date=2026-11-20/event_hour=10"
T0 = datetime(2026, 11, 20, tzinfo=UTC)


def table_of(platform: PlatformConfig) -> WarehouseTable:
    return WarehouseTable.of(platform, "router", COLUMNS)


def test_partition_keys_name_the_partition_columns_in_order(platform_conf: PlatformConfig) -> None:
    table = table_of(platform_conf)
    partition = {"route": "a", "event_date": "2026-11-20", "event_hour": 10}
    assert table.partition_key(partition) == KEY
    assert table.parse_partition(KEY) == {"route": "a", "event_date": "2026-11-20", "event_hour": "10"}
    assert table.partition_clause(partition) == (
        "PARTITION (`route`='a', `event_date`='2026-11-20', `event_hour`='10')"
    )
    assert table.version_location(KEY, 3) == platform_conf.warehouse_root / "router" / KEY / "v00003"
    with pytest.raises(WarehouseError, match="route=VALUE/event_date=VALUE/event_hour=VALUE"):
        table.parse_partition("route=a/event_hour=10")
    with pytest.raises(WarehouseError, match="must name its partition columns"):
        table.partition_key({"event_date": "2026-11-20", "route": "a", "event_hour": 10})


def test_retention_deletes_replaced_versions_once_the_period_is_over(
    platform_conf: PlatformConfig, ledger: Ledger
) -> None:
    table = table_of(platform_conf)
    published_at = [T0, T0 + timedelta(days=1), T0 + timedelta(days=5)]
    versions = []
    for at in published_at:
        record = ledger.add_partition_version("router", KEY, location="", source="compaction")
        location = table.version_location(KEY, record.version)
        location.mkdir(parents=True)
        ledger.update_partition_version(
            record.id, location=str(location), status="published", published_at=at
        )
        versions.append(location)
    blocked = ledger.add_partition_version("router", KEY, location="", source="compaction")
    blocked_location = table.version_location(KEY, blocked.version)
    blocked_location.mkdir()
    ledger.update_partition_version(blocked.id, location=str(blocked_location), status="blocked")

    # v1 was replaced on day 1, v2 on day 5: with 3 days' retention, on day 6 only v1 goes.
    expired = expire_versions(ledger, table, timedelta(days=3), now=T0 + timedelta(days=6))
    assert [record.version for record in expired] == [1]
    assert [path.exists() for path in versions] == [False, True, True]
    # The blocked version (created now, in this test) is still inside the period.
    assert blocked_location.exists()
    # Later, everything but the version the partition shows.
    later = expire_versions(ledger, table, timedelta(days=3), now=datetime.now(UTC) + timedelta(days=30))
    assert sorted(record.version for record in later) == [2, 4]
    assert [Path(path).exists() for path in (*versions, blocked_location)] == [False, False, True, False]
    assert expire_versions(ledger, table, timedelta(days=3), now=datetime.now(UTC) + timedelta(days=60)) == []
