"""The bounded sink log's rewrite against a driver that compacts meanwhile, on real log files: a
compact file a driver was writing when the expiry renamed the one it read is waited for and
filtered too; the horizon cannot be shorter than a partition takes to close.

`tests/ops/test_compaction_sinklog.py` runs the whole thing with Spark over three days."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from ops.driver.checkpoint import sink_files
from ops.exceptions import WarehouseError
from ops.spec.job import CompactionPolicy
from ops.warehouse.sinklog import drop_from_log


def entry(path: Path, *files: Path) -> None:
    records = [json.dumps({"path": file.as_uri(), "size": 1, "action": "add"}) for file in files]
    path.write_text("\n".join(["v1", *records]))


def test_a_compact_file_written_during_the_rewrite_is_filtered_too(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    old, kept, new = (tmp_path / f"part-{name}.parquet" for name in ("old", "kept", "new"))
    entry(log / "9.compact", old, kept)
    for batch in range(10, 19):
        entry(log / str(batch), new)
    # A driver opened 9.compact before the rename and is writing 19.compact from it.
    in_flight = log / ".19.compact.0b7c-uuid.tmp"
    in_flight.write_text("v1")

    def driver_finishes() -> None:
        time.sleep(0.5)
        entry(log / "19.compact", old, kept, new)
        in_flight.unlink()

    writer = threading.Thread(target=driver_finishes)
    writer.start()
    drop_from_log(log, {old}, in_flight_timeout=30)
    writer.join()

    assert sink_files(log) == {kept, new}
    assert sink_files(log, upto=9) == {kept}
    assert (log / "10").read_text().endswith('part-new.parquet", "size": 1, "action": "add"}')


def test_a_compact_file_that_stays_in_flight_fails_the_expiry(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()
    gone = tmp_path / "part-gone.parquet"
    entry(log / "9.compact", gone)
    (log / ".19.compact.left-by-a-killed-driver.tmp").write_text("v1")
    with pytest.raises(WarehouseError, match="leftover temporary file"):
        drop_from_log(log, {gone}, in_flight_timeout=0.3)


def test_the_sink_horizon_cannot_end_before_a_partition_closes() -> None:
    with pytest.raises(ValidationError, match="would expire before it is compacted"):
        CompactionPolicy(closed_after_hours=6, sink_retention_hours=2)
    assert CompactionPolicy(closed_after_hours=2, sink_retention_hours=36).sink_retention_hours == 36
