"""A reader during a publish sees one version only (issue 16): a Spark process of its own queries a
partition of the warehouse table through the shared metastore, again and again, while a compaction
republishes that partition; every answer is exactly the old version's rows or the new one's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ops.ledger.store import Ledger
from ops.spec.job import find_job
from ops.spec.platform import CONF_DIR_ENV, PlatformConfig
from synthetic.scenarios import router_scenario
from tests.ops.test_compaction_publish import LATER, add_late_rows, small_batches
from tests.support.drivers import edit_job
from tests.support.spark import run_available_now
from tests.support.warehouse import (
    REPO_ROOT,
    RESULT_PREFIX,
    SPARK_PROCESS_TIMEOUT,
    compact_job,
    query_table,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


class LoopingReader:
    """`python -m tests.support.warehouse --until STOP SQL`: each answer's event ids, as they come."""

    def __init__(self, platform: PlatformConfig, sql: str, stop: Path) -> None:
        self.stop = stop
        self.answers: list[Counter[str]] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.warehouse", "--until", str(stop), sql],
            cwd=REPO_ROOT,
            env={**os.environ, CONF_DIR_ENV: str(platform.conf_dir)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=lambda: self.stderr.extend(self.process.stderr or []), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(RESULT_PREFIX):
                rows = json.loads(line.removeprefix(RESULT_PREFIX))
                self.answers.append(Counter(row["event_id"] for row in rows))

    def wait_for(self, expected: Counter[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while expected not in self.answers:
            assert self.process.poll() is None, "".join(self.stderr)[-6000:]
            assert time.monotonic() < deadline, f"no answer {sum(expected.values())} rows yet"
            time.sleep(0.2)

    def finish(self) -> list[Counter[str]]:
        self.stop.touch()
        exit_code = self.process.wait(timeout=SPARK_PROCESS_TIMEOUT)
        for reader in self.readers:
            reader.join()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        assert exit_code == 0, "".join(self.stderr)[-6000:]
        return self.answers


def test_a_reader_during_a_publish_sees_the_old_version_or_the_new_never_a_mix(
    spark: SparkSession, warehouse_platform: PlatformConfig, tmp_path: Path
) -> None:
    platform = warehouse_platform
    edit_job(platform, "router", small_batches)
    router_scenario(platform.landing_root, 240, seed=3)
    run_available_now(spark, platform, find_job("router", platform.conf_dir))
    compact_job(platform, "router", "--now", LATER)
    ledger = Ledger.open(platform.resolved_ledger_url)
    key = next(v.partition for v in ledger.partition_versions("router") if "route=purchases" in v.partition)
    values = dict(part.split("=") for part in key.split("/"))
    sql = (
        "SELECT event_id FROM warehouse.router WHERE route = 'purchases' "
        f"AND event_date = '{values['event_date']}' AND event_hour = {values['event_hour']}"
    )
    old = Counter(row["event_id"] for row in query_table(platform, sql))
    add_late_rows(platform, key, count=5)
    new = old + Counter(f"late-{n}" for n in range(5))

    reader = LoopingReader(platform, sql, tmp_path / "stop")
    reader.wait_for(old, timeout=SPARK_PROCESS_TIMEOUT)
    compact_job(platform, "router", "--now", LATER, "--partition", key)
    reader.wait_for(new, timeout=120)
    answers = reader.finish()

    seen = Counter("old" if answer == old else "new" if answer == new else "mixed" for answer in answers)
    old_rows, new_rows = sum(old.values()), sum(new.values())
    print(f"reader answers during the publish: {dict(seen)} (old {old_rows} rows, new {new_rows})")
    assert seen["mixed"] == 0, [sum(answer.values()) for answer in answers]
    first_new = next(index for index, answer in enumerate(answers) if answer == new)
    assert all(answer == new for answer in answers[first_new:]), "an answer went back to the old version"
    assert answers[0] == old
