"""`warden state`: the device_health job's committed state, read back from a real checkpoint."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from ops.cli import main
from ops.exceptions import StateReadError
from ops.recovery.state_reader import last_committed_batch, read_value_state
from ops.spec.job import find_job
from ops.spec.platform import PlatformConfig
from tests.support.device_state import STATE_ROWS, run_device_health


@pytest.fixture
def device_state(spark: SparkSession, platform_conf: PlatformConfig) -> PlatformConfig:
    return run_device_health(spark, platform_conf)


def test_state_reader_and_cli_show_the_latest_reading_per_key(
    spark: SparkSession, device_state: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = find_job("device_health", device_state.conf_dir)
    table = read_value_state(spark, device_state, spec)
    # The newest commit: the third data batch, or the no-data batch that may follow it when the
    # watermark moved.
    committed = last_committed_batch(device_state.checkpoint_root / "device_health")
    assert committed is not None and committed >= 2
    assert table.batch_id == committed and table.state_var == "latest"
    assert table.columns == (
        "device_id",
        "data_point",
        "value",
        "event_time",
        "event_id",
        "health",
        "health_since",
    )
    assert list(table.rows) == STATE_ROWS
    assert list(read_value_state(spark, device_state, spec, key="d2").rows) == STATE_ROWS[2:]

    assert main(["state", "device_health"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"device_health: state 'latest' as of batch {committed}, 3 keys",
        "device_id  data_point   value  event_time                event_id  health  health_since",
        "d1         signal_db    -12.5  2025-01-01T10:02:00.000Z  a2        RED     2025-01-01T10:02:00.000Z",
        "d1         temperature  20.0   2025-01-01T10:01:00.000Z  a0        GREEN   2025-01-01T10:01:00.000Z",
        "d2         temperature  71.0   2025-01-01T10:03:00.000Z  b2        RED     2025-01-01T10:00:00.000Z",
    ]
    assert main(["state", "device_health", "--key", "d1"]) == 0
    assert [line.split()[:3] for line in capsys.readouterr().out.splitlines()[2:]] == [
        ["d1", "signal_db", "-12.5"],
        ["d1", "temperature", "20.0"],
    ]
    assert main(["state", "device_health", "--key", "d2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "job": "device_health",
        "state_var": "latest",
        "batch_id": committed,
        "key_columns": ["device_id", "data_point"],
        "value_columns": ["value", "event_time", "event_id", "health", "health_since"],
        "rows": [
            ["d2", "temperature", 71.0, "2025-01-01T10:03:00+00:00", "b2", "RED", "2025-01-01T10:00:00+00:00"]
        ],
    }
    assert main(["state", "device_health", "--key", "d9"]) == 1
    captured = capsys.readouterr()
    assert "0 keys" in captured.out
    assert "no state for key 'd9' in job 'device_health'" in captured.err


def test_state_of_a_stateless_job_or_before_the_first_commit_is_a_clear_error(
    spark: SparkSession, platform_conf: PlatformConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["state", "router"]) == 2
    assert "job 'router' is not stateful: it keeps no state to read" in capsys.readouterr().err
    assert main(["state", "device_health"]) == 2
    assert "job 'device_health' has no committed batch yet" in capsys.readouterr().err
    with pytest.raises(StateReadError, match="no committed batch yet"):
        read_value_state(spark, platform_conf, find_job("device_health", platform_conf.conf_dir))
