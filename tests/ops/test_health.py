"""Landing backlog: files landed but not yet in the checkpoint's file-source log."""

from __future__ import annotations

import json
from pathlib import Path

from ops.driver.checkpoint import landing_backlog


def write_log(log_dir: Path, name: str, paths: list[Path], batch: int) -> None:
    entries = [json.dumps({"path": f"file://{p}", "timestamp": 0, "batchId": batch}) for p in paths]
    (log_dir / name).write_text("\n".join(["v1", *entries]))


def test_backlog_counts_unread_files_through_compaction_over_every_source(tmp_path: Path) -> None:
    landing, log_dir = tmp_path / "landing", tmp_path / "sources" / "0"
    landing.mkdir()
    assert landing_backlog([landing], tmp_path / "sources") is None
    log_dir.mkdir(parents=True)
    files = [landing / f"events-{i}.json" for i in range(14)]
    for path in files:
        path.write_text("{}\n")
    (landing / ".events-99.json.tmp").write_text("partial")
    assert landing_backlog([landing], tmp_path / "sources") == 14
    for batch in range(9):
        write_log(log_dir, str(batch), [files[batch]], batch)
    # Batch 9 compacts: the compact file repeats every entry up to and including batch 9.
    write_log(log_dir, "9.compact", files[:10], 9)
    write_log(log_dir, "10", [files[10]], 10)
    assert landing_backlog([landing], tmp_path / "sources") == 3

    # A second source: its own landing directory and log.
    other, other_log = tmp_path / "other", tmp_path / "sources" / "1"
    other.mkdir()
    other_log.mkdir()
    other_files = [other / f"plays-{i}.json" for i in range(2)]
    for path in other_files:
        path.write_text("{}\n")
    write_log(other_log, "0", other_files[:1], 0)
    assert landing_backlog([landing, other], tmp_path / "sources") == 4
